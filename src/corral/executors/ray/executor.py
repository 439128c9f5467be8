"""`RayExecutor`: every job's workers are Ray actors, placed with placement groups.

The contract (corral.executors.base) on a Ray cluster, also under KubeRay (docs/ray.md). The
cluster is Ray's node table (ray.nodes); each worker is an actor (ray.worker) in a placement
group of its own, pinned to its node, so one slot can be given back alone (ray.launch). Resizes
in place where possible (ray.resize); early initialisation unless `early_init=False`
(ray.early, ray.seats). Job files live under `<storage>/jobs/<job id>/`, seen by every node. Decided here:
actors are owned by the service's driver, so workers die with it and resume from checkpoints; a
lost node is a crash towards `max_retries`, restarted on its placement or packed where it fits.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayError

from corral.core.cluster import Cluster
from corral.core.errors import InputError
from corral.executors.base import ExecState, WorkerPlan
from corral.executors.early import EARLY_READY_TIMEOUT_S, EarlyStarts
from corral.executors.lifecycle import JobRecord, JobTableExecutor
from corral.executors.ray.early import RayEarlyStart
from corral.executors.ray.launch import (
    LOST,
    Launcher,
    LaunchError,
    Target,
    WorkerSet,
    connect,
    ready,
    remove_groups,
)
from corral.executors.ray.nodes import NodeTable
from corral.executors.ray.resize import PidLookup, RayResize, local_ranks, merged, plan_in_place
from corral.executors.ray.seats import RayEarlySeats, lost_note
from corral.executors.resize import IN_PLACE, check_mechanism, regroup_failure, runs_corral_train
from corral.protocol.env import ENV_GPU_TYPE, WorkerEnv
from corral.protocol.inplace import ENV_JOIN_GENERATION, ResizeRequest, ready_ranks, write_request

__all__ = ["RayExecutor", "connect"]

log = logging.getLogger("corral.executors.ray.executor")


@dataclass
class _Job(JobRecord):
    """A job and its Ray worker set; `plan` holds the node indices its workers actually got."""

    target: Target | None
    ws: WorkerSet | None = None  # the worker set being started, running or stopping
    resize: RayResize | None = None  # an in-place resize under way
    pid_lookup: PidLookup | None = None  # rank 0's command pid, asked of its actor
    early: RayEarlyStart | None = None  # its next launch, started early


class RayExecutor(JobTableExecutor[_Job]):
    """Runs workers as Ray actors; see the module docstring.

    Options (the CLI passes them through `corral serve`): `address` (default $RAY_ADDRESS; none:
    start a single-node Ray here with `slots` CPUs), `resource` (default $CORRAL_RAY_RESOURCE,
    else GPU when the cluster has GPUs, else CPU), `storage` (default $CORRAL_RAY_STORAGE, else
    the data directory), `mechanism` (how running jobs are resized: in-place or
    checkpoint-restart), `early_init` (start a job on slots other jobs give up while they train
    on; corral.executors.ray.early), `sandbox` (each worker runs in the job sandbox,
    corral.executors.sandbox, kept from the data directory and the storage: True on every node
    or the worker does not start, None where the node has Landlock, False nowhere). `slots` is
    ignored when connecting to an existing
    cluster."""

    name = "ray"
    _job_type = _Job
    _join_timeout_s = 10.0
    #: Seconds rank 0's actor gets to name its command's pid (`_runs_trainer`).
    _pid_timeout_s = 10.0

    def __init__(self, data_dir: str | Path, *, address: str | None = None,
                 resource: str | None = None, storage: str | Path | None = None,
                 slots: int | None = None, gpus: Sequence[int] | None = None,
                 max_retries: int = 3, stop_timeout_s: float = 30.0, crash_grace_s: float = 2.0,
                 report_interval_s: float = 30.0, checkpoint_interval_s: float = 600.0,
                 poll_s: float = 0.05, nodes_poll_s: float = 0.5,
                 retry_backoff_s: float = 1.0, mechanism: str = IN_PLACE,
                 early_init: bool = True,
                 early_timeout_s: float = EARLY_READY_TIMEOUT_S,
                 sandbox: bool | None = None) -> None:
        if gpus:
            raise InputError("--gpus is for the local executor; on Ray the GPUs are the nodes' "
                             "(start Ray with the GPUs it should offer)")
        self.mechanism = check_mechanism(mechanism)
        address = address or os.environ.get("RAY_ADDRESS") or None
        self._owns_ray = connect(address, num_cpus=slots)
        resource = resource or os.environ.get("CORRAL_RAY_RESOURCE") or (
            "GPU" if ray.cluster_resources().get("GPU", 0) >= 1 else "CPU")
        self.data_dir = Path(data_dir)
        self.storage = Path(storage or os.environ.get("CORRAL_RAY_STORAGE") or self.data_dir)
        self.nodes_poll_s = nodes_poll_s
        self.launcher = Launcher(resource, secrets.token_hex(3), sandbox=(
            sandbox, tuple(dict.fromkeys([str(self.data_dir), str(self.storage)]))))
        self.node_table = NodeTable(resource)
        if not self.node_table.update(ray.nodes()):  # nodes may still join (an autoscaler)
            log.warning("no Ray node offers the %r resource yet: the cluster is empty", resource)
        self._nodes_at = time.monotonic()
        #: the seats and worker sets of early starts (corral.executors.ray.seats)
        self.early_seats = RayEarlySeats(self)
        super().__init__(self.storage, thread_name="corral-ray-executor", max_retries=max_retries,
                         stop_timeout_s=stop_timeout_s, crash_grace_s=crash_grace_s,
                         report_interval_s=report_interval_s,
                         checkpoint_interval_s=checkpoint_interval_s, poll_s=poll_s,
                         retry_backoff_s=retry_backoff_s,
                         early=EarlyStarts(self, self.early_seats, timeout_s=early_timeout_s)
                         if early_init else None)

    @property
    def resource(self) -> str:
        return self.launcher.resource

    # -- the contract (the rest is JobTableExecutor's) ------------------------------------------
    def cluster(self) -> Cluster:
        with self._lock:
            return self.node_table.cluster()

    def node_ids(self) -> tuple[str, ...]:
        """Ray node ids in the order of `cluster()`'s nodes."""
        with self._lock:
            return tuple(n.node_id for n in self.node_table.nodes)

    def reclaim(self, job_id: str, workers: Sequence[str]) -> None:
        """Actors of an earlier executor in a Ray driver that is still alive (one whose driver
        died took its actors along: nothing is left to stop)."""
        prefix = f"corral-{job_id}-"
        actors: list[Any] = []  # (like WorkerSet.actors: ray types a handle's methods as Never)
        for name in sorted({str(w) for w in [*workers, *self.files.recorded_workers(job_id)]
                            if str(w).startswith(prefix)}):
            try:
                actors.append(ray.get_actor(name))
            except (ValueError, RayError):
                continue
        if not actors:
            return
        self.files.note(job_id, f"stopping {len(actors)} worker(s) left by an earlier service")
        waits = [a.wait.remote() for a in actors]
        for a in actors:
            a.signal.remote(signal.SIGTERM)
        ray.wait(waits, num_returns=len(waits), timeout=self.stop_timeout_s)
        for a in actors:
            ray.kill(a, no_restart=True)
        ray.wait(waits, num_returns=len(waits), timeout=5.0)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        super().shutdown(timeout_s)
        if self._owns_ray:
            ray.shutdown()

    # -- hooks --------------------------------------------------------------------------------
    def _target_for(self, job_id: str, plan: WorkerPlan) -> Target:
        """The plan resolved to Ray nodes; one naming a node that has gone is packed."""
        if plan.num_workers < 1:
            raise ValueError(f"job {job_id}: a placement needs at least one worker")
        nodes = self.node_table.resolve(plan.placement)
        if nodes is None:
            count = min(plan.num_workers, max(self.node_table.total_slots, 1))
            self.files.note(job_id, f"placement {plan.placement} does not fit the nodes now "
                       f"({self.node_table.cluster().describe()}); packing {count} worker(s)")
            return Target.of(plan, None, count)
        return Target.of(plan, nodes, plan.num_workers)

    def _refresh(self) -> None:
        """Re-read Ray's node table every `nodes_poll_s`."""
        try:
            if time.monotonic() - self._nodes_at >= self.nodes_poll_s:
                nodes = ray.nodes()
                with self._lock:
                    self.node_table.update(nodes)
                self._nodes_at = time.monotonic()
        except RayError:
            pass  # the GCS is briefly unreachable: keep the last table

    @staticmethod
    def _codes_note(codes: Sequence[int]) -> str:
        return lost_note(codes)

    def has_workers(self, j: _Job) -> bool:
        return j.ws is not None or j.resize is not None or j.early is not None

    def _live_workers(self, j: _Job) -> tuple[str, ...]:
        return j.ws.live_names if j.ws else ()

    def _advance(self, j: _Job) -> None:
        if self.advance_in_flight(j):
            return
        ws = j.ws
        if ws is None:
            return
        if not ws.started:
            if j.state is ExecState.STOPPING:  # called off before any process started
                self.exited(j)
            elif j.target != ws.target or (  # re-placed, or its node left, while reserving
                    ws.target.nodes is not None and not self.node_table.still_fits(ws.target.nodes)):
                self._requeue(j)
            elif ready(*ws.waiting):
                (self._create_actors if ws.phase == "pg" else self._start_workers)(j)
            return
        if ws.phase == "start" and ready(*ws.starts):
            error = ws.start_error()
            if error:
                self._fail(j, error)
                return
            ws.phase = "run"
        ws.collect()
        self._watch(j, ws.codes, ws.target)

    def _signal(self, j: _Job, signum: int) -> None:
        if j.ws is not None:  # (a job starting early has none yet)
            j.ws.signal(signum)

    def _escalate(self, j: _Job) -> None:
        """SIGKILL the workers, then kill their actors."""
        assert j.ws is not None
        if j.killed == 0:
            j.ws.signal(signal.SIGKILL)
        else:
            j.ws.kill_actors(only_running=True)
        j.deadline = time.monotonic() + 5.0

    def _final_codes(self, j: _Job) -> list[int] | None:
        return ([c if c is not None else LOST for c in j.ws.codes]
                if j.ws is not None and j.ws.started else None)

    def _release(self, j: _Job) -> None:
        """Kill the job's actors and free its placement groups, but those promised to a job
        starting early on them (they pass to it)."""
        if j.resize is not None:
            self._drop_joiners(j)
        if j.early is not None:
            self.early_seats.drop(j)
        if j.ws is not None:
            j.ws.release(keep=self._handed_groups())
            j.ws = None

    def _requeue(self, j: _Job) -> None:
        self._release(j)
        j.state, j.queued_at = ExecState.QUEUED, time.monotonic()

    # -- launching ----------------------------------------------------------------------------
    def _try_start(self, j: _Job) -> None:
        assert j.target is not None
        if j.target.nodes is not None and not self.node_table.still_fits(j.target.nodes):
            count = min(j.target.count, max(self.node_table.total_slots, 1))
            self.files.note(j.launch.job_id, f"a node of its placement has left; packing {count} "
                       "worker(s) wherever they fit")
            j.target = Target.of(j.target.plan, None, count)
        try:
            j.ws = self.launcher.reserve(j.target)
        except LaunchError as exc:
            self._fail(j, str(exc))

    def _create_actors(self, j: _Job) -> None:
        assert j.ws is not None
        self.launcher.create_actors(j.ws, j.launch.job_id, j.launches, self.node_table)
        j.plan = WorkerPlan(j.ws.placement, j.ws.target.plan.batch)

    def _start_workers(self, j: _Job) -> None:
        """Rank 0's actor is up: start every worker with the rendezvous at its node."""
        assert j.ws is not None
        if not self.start_set(j, j.ws):
            self._requeue(j)
            return
        j.state, j.started_at = ExecState.RUNNING, time.time()
        j.launches += 1
        self.files.record_workers(j.launch.job_id, j.ws.names)

    def start_set(self, j: _Job, ws: WorkerSet, extra: dict[str, str] | None = None,
                   devices: Sequence[Sequence[str] | None] = ()) -> bool:
        """Start the workers of `ws` (its rank 0's actor is up) with the rendezvous at its node,
        `extra` variables and, per rank, the GPUs to use where given; False when rank 0's
        actor died before it answered (its node left?)."""
        job = j.launch
        try:
            master_addr, master_port = self.launcher.rendezvous(ws)
        except RayError as exc:
            self.files.note(job.job_id, f"worker actor lost while starting: {type(exc).__name__}")
            return False
        batch = ws.target.plan.batch
        base = {**self._worker_env(j, batch, ws.num_nodes, gpu=self.launcher.gpu), **(extra or {})}
        k = len(ws.actors)
        envs = [{**base, **WorkerEnv(rank=rank, world_size=k, local_rank=local_rank,
                                     local_world_size=local_size, master_addr=master_addr,
                                     master_port=master_port,
                                     backend=self.launcher.backend).to_env(),
                 ENV_GPU_TYPE: self.node_table.type_of(node)}
                for rank, (_, node, local_rank, local_size) in enumerate(ws.slots)]
        self.files.note(job.job_id, f"launch {j.launches}: {k} worker(s) as Ray actors on "
                   f"{ws.placement} ({self.resource})"
                   + (f", batch {batch.local_bsz}x{batch.accum_steps + 1}" if batch else "")
                   + f", rendezvous {master_addr}:{master_port}")
        self.launcher.start(ws, job.command, job.cwd, envs,
                            [str(self.files.log_path(job.job_id, r)) for r in range(k)], devices)
        return True

    # -- in-place resize (corral.executors.ray.resize) ------------------------------------------
    def _resize(self, j: _Job) -> None:
        """Resize in place when the job and the move allow it, else checkpoint-restart (the
        lifecycle calls this at every look while the job's target differs from its workers',
        so a look that is still waiting for rank 0's pid returns and a later one decides)."""
        ws, target = j.ws, j.target
        assert ws is not None and target is not None
        plan = (plan_in_place(ws.nodes, target.nodes)
                if self.mechanism == IN_PLACE and ws.phase == "run" and ws.per_worker
                and target.nodes is not None else None)
        trainer = self._runs_trainer(j) if plan is not None else False
        if trainer is None:
            return
        if not trainer:
            super()._resize(j)
            return
        assert plan is not None  # (trainer is only true with a plan)
        joiners = None
        if plan.joiners:
            try:
                joiners = self.launcher.reserve(Target.of(target.plan, plan.joiners,
                                                          sum(c for _, c in plan.joiners)))
            except LaunchError as exc:
                self.event(j, "resize-fallback", f"in-place resize: {exc}; resizing by "
                            "checkpoint-restart instead")
                super()._resize(j)
                return
        j.resize = RayResize(target, self.launch_number(j), plan, joiners,
                             [ws.actors[0].address.remote()])
        self.files.note(j.launch.job_id, f"resizing in place from {len(ws.actors)} to "
                   f"{plan.new_world} worker(s) (generation {j.resize.generation})")

    def _runs_trainer(self, j: _Job) -> bool | None:
        """The running launch's rank 0 is a corral.train trainer (its report names the pid of
        rank 0's command), so SIGUSR1 reaches its regroup handler; None while the pid is still
        being asked of rank 0's actor (PidLookup: asked once, never waited for; no answer in
        `_pid_timeout_s` counts as not a trainer)."""
        assert j.ws is not None
        name, lookup = j.ws.names[0], j.pid_lookup
        if lookup is None or lookup.actor != name:
            lookup = j.pid_lookup = PidLookup(name, j.ws.actors[0].command_pid.remote(),
                                              time.monotonic() + self._pid_timeout_s)
        if not ready(lookup.ref):
            if time.monotonic() < lookup.deadline:
                return None
            j.pid_lookup = None
            self.files.note(j.launch.job_id, "rank 0's actor did not name its command's pid in "
                       f"{self._pid_timeout_s:g} s; resizing by checkpoint-restart")
            return False
        try:
            pid = ray.get(lookup.ref)
        except RayError:
            pid = None
        if pid is None:  # rank 0's command had exited (or its actor died): ask again next time
            j.pid_lookup = None
            return False
        return runs_corral_train(self.report(j.launch.job_id), self.launch_number(j) - 1, pid)

    def _advance_resize(self, j: _Job) -> None:
        """One look at the resize under way: start the new workers, send the request once
        they are ready, take the new worker set once it reports, or fall back."""
        r, ws = j.resize, j.ws
        assert r is not None and ws is not None
        ws.collect()
        if r.joiners is not None and r.joiners.started:
            r.joiners.collect()
        joiner_codes = r.joiners.codes if r.joiners is not None else []
        if r.phase == "joining":
            if self._joining_ended(j, r.target, ws.codes, joiner_codes):
                return
            if r.master is None:
                if ready(*r.address):
                    r.master = tuple(ray.get(r.address[0]))
            elif r.joiners is not None and not r.joiners.started:
                self._start_joiners(j)
            elif r.joiners is not None and ready(*r.joiners.starts) and r.joiners.start_error():
                self._fall_back(j, f"a new worker could not start: {r.joiners.start_error()}")
            elif r.joiner_ranks <= ready_ranks(self.files.control_dir(j.launch.job_id), r.generation):
                self._send_request(j)
            return
        report = self.report(j.launch.job_id)
        if (report and report.get("launch") == r.generation
                and report.get("world_size") == r.plan.new_world):
            self._take_new_set(j)
            return
        why = regroup_failure(ws.codes, r.plan.leaving, joiner_codes)
        if why:
            self._fall_back(j, why)
        elif r.timed_out():
            self._fall_back(j, "the new process group did not report in time")

    def _start_joiners(self, j: _Job) -> None:
        """The joiners' groups are reserved: create their actors, then start them with the new
        rendezvous once their actors are up (the next looks)."""
        r, job, ws = j.resize, j.launch, j.ws
        assert r is not None and r.joiners is not None and ws is not None
        js = r.joiners
        if js.phase == "pg":
            if ready(*js.waiting):
                self.launcher.create_actors(js, job.job_id, r.generation, self.node_table,
                                            first_rank=len(r.plan.staying))
            return
        if not ready(*js.waiting):
            return
        assert r.master is not None
        nodes = [ws.nodes[rank] for rank in r.plan.staying] + js.nodes
        base = self._worker_env(j, r.target.plan.batch, len(set(nodes)), gpu=self.launcher.gpu)
        base[ENV_JOIN_GENERATION] = str(r.generation)
        envs, first = [], len(r.plan.staying)
        for i, (local_rank, local_size) in enumerate(local_ranks(nodes)[first:]):
            envs.append({**base, **WorkerEnv(
                rank=first + i, world_size=r.plan.new_world, local_rank=local_rank,
                local_world_size=local_size, master_addr=r.master[0], master_port=r.master[1],
                backend=self.launcher.backend).to_env(),
                ENV_GPU_TYPE: self.node_table.type_of(nodes[first + i])})
        self.launcher.start(js, job.command, job.cwd, envs,
                            [str(self.files.log_path(job.job_id, first + i)) for i in range(len(envs))])

    def _send_request(self, j: _Job) -> None:
        r, ws = j.resize, j.ws
        assert r is not None and r.master is not None and ws is not None
        batch = r.target.plan.batch
        nodes = {ws.nodes[rank] for rank in r.plan.staying} | set(
            r.joiners.nodes if r.joiners is not None else ())
        write_request(self.files.control_dir(j.launch.job_id), ResizeRequest(
            r.generation, r.plan.new_world, r.master[0], r.master[1], dict(r.plan.ranks),
            batch=(batch.local_bsz, batch.accum_steps) if batch else None,
            num_nodes=len(nodes), launch=r.generation))
        r.switch()
        for actor, code in zip(ws.actors, ws.codes):
            if code is None:
                actor.signal_command.remote(signal.SIGUSR1)

    def _take_new_set(self, j: _Job) -> None:
        """The new process group trains: it is the job's worker set from now on; the leavers'
        actors end and their slots are given back."""
        r, old, job = j.resize, j.ws, j.launch
        assert r is not None and old is not None
        for rank in r.plan.leaving:
            ray.kill(old.actors[rank], no_restart=True)
        remove_groups([old.seats[old.slots[rank][0]][0] for rank in r.plan.leaving],
                      keep=self._handed_groups())
        j.ws, j.resize = merged(old, r), None
        j.ws.placement = self.node_table.placement_of(j.ws.nodes)
        j.plan, j.started_at = WorkerPlan(j.ws.placement, r.target.plan.batch), time.time()
        j.launches += 1
        self.files.record_workers(job.job_id, j.ws.names)
        self.event(j, "resized", f"launch {r.generation}: resized in place from {len(old.actors)} "
                    f"to {r.plan.new_world} worker(s) {r.took()}")

    def _drop_joiners(self, j: _Job) -> None:
        """End the resize's new workers and give back their slots."""
        r, j.resize = j.resize, None
        assert r is not None
        if r.joiners is not None:
            r.joiners.release()

    # -- early initialisation (corral.executors.early: the sequence; ray.seats: the seats) ------
    def _handed_groups(self) -> set[str]:
        """Ids of the donors' placement groups promised to jobs starting early: a donor that
        gives its slot up leaves them in place (they pass to the incoming job)."""
        return {s.pg.id.hex() for s in (self.early.promised_slots() if self.early else [])}
