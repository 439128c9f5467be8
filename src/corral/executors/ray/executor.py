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
from corral.executors.backend import Polled
from corral.executors.base import ExecState, WorkerPlan
from corral.executors.early import EARLY_READY_TIMEOUT_S, EarlyStarts
from corral.executors.lifecycle import LOST, JobRecord, JobTable
from corral.executors.ray.early import RayEarlyStart
from corral.executors.ray.inplace import RayInPlace
from corral.executors.ray.launch import (
    Launcher,
    LaunchError,
    Target,
    WorkerSet,
    connect,
    ready,
)
from corral.executors.ray.nodes import NodeTable
from corral.executors.ray.resize import PidLookup, RayResize
from corral.executors.ray.seats import RayEarlySeats
from corral.executors.resize import IN_PLACE, ResizeDeadlines, check_mechanism
from corral.protocol.env import ENV_GPU_TYPE, WorkerEnv

__all__ = ["RayExecutor", "RayWorkers", "connect"]

log = logging.getLogger("corral.executors.ray.executor")


@dataclass
class _Job(JobRecord):
    """A job and its Ray worker set; `plan` holds the node indices its workers actually got."""

    target: Target | None
    ws: WorkerSet | None = None  # the worker set being started, running or stopping
    resize: RayResize | None = None  # an in-place resize under way
    pid_lookup: PidLookup | None = None  # rank 0's command pid, asked of its actor
    early: RayEarlyStart | None = None  # its next launch, started early


class RayExecutor(JobTable[_Job]):
    """Runs workers as Ray actors: the job table over `RayWorkers`; see the module docstring.

    Options (the CLI passes them through `corral serve`): `address` (default $RAY_ADDRESS; none:
    start a single-node Ray here with `slots` CPUs), `resource` (default $CORRAL_RAY_RESOURCE,
    else GPU when the cluster has GPUs, else CPU), `storage` (default $CORRAL_RAY_STORAGE, else
    the data directory), `mechanism` (how running jobs are resized: in-place or
    checkpoint-restart), `early_init` (start a job on slots other jobs give up while they train
    on; corral.executors.ray.early), `resize_deadlines` (how long each phase of an in-place
    resize may take before it falls back; corral.executors.resize), `sandbox` (each worker runs
    in the job sandbox, corral.executors.sandbox, kept from the data directory and the storage:
    True on every node or the worker does not start, None where the node has Landlock, False
    nowhere). `slots` is ignored when connecting to an existing cluster."""

    name = "ray"

    def __init__(self, data_dir: str | Path, *, address: str | None = None,
                 resource: str | None = None, storage: str | Path | None = None,
                 slots: int | None = None, gpus: Sequence[int] | None = None,
                 max_retries: int = 3, stop_timeout_s: float = 30.0, crash_grace_s: float = 2.0,
                 report_interval_s: float = 30.0, checkpoint_interval_s: float = 600.0,
                 poll_s: float = 0.05, nodes_poll_s: float = 0.5,
                 retry_backoff_s: float = 1.0, mechanism: str = IN_PLACE,
                 early_init: bool = True,
                 early_timeout_s: float = EARLY_READY_TIMEOUT_S,
                 resize_deadlines: ResizeDeadlines | None = None,
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
        launcher = Launcher(resource, secrets.token_hex(3), sandbox=(
            sandbox, tuple(dict.fromkeys([str(self.data_dir), str(self.storage)]))))
        #: the backend: Ray's nodes and each job's worker actors
        self.workers = RayWorkers(self, launcher, NodeTable(resource), nodes_poll_s)
        super().__init__(self.storage, self.workers, _Job, thread_name="corral-ray-executor",
                         max_retries=max_retries, stop_timeout_s=stop_timeout_s,
                         crash_grace_s=crash_grace_s, report_interval_s=report_interval_s,
                         checkpoint_interval_s=checkpoint_interval_s, poll_s=poll_s,
                         retry_backoff_s=retry_backoff_s, join_timeout_s=10.0,
                         early=EarlyStarts(self, RayEarlySeats(self.workers),
                                           timeout_s=early_timeout_s) if early_init else None,
                         inplace=RayInPlace(self.workers, resize_deadlines or ResizeDeadlines())
                         if self.mechanism == IN_PLACE else None)

    @property
    def resource(self) -> str:
        return self.workers.launcher.resource

    def node_ids(self) -> tuple[str, ...]:
        """Ray node ids in the order of `cluster()`'s nodes."""
        with self.lock:
            return tuple(n.node_id for n in self.workers.node_table.nodes)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        super().shutdown(timeout_s)
        if self._owns_ray:
            ray.shutdown()


class RayWorkers:
    """The Ray backend (`corral.executors.backend.Backend`): Ray's node table and each job's
    worker set (`WorkerSet`, corral.executors.ray.launch), one actor per worker."""

    def __init__(self, table: JobTable[_Job], launcher: Launcher, node_table: NodeTable,
                 nodes_poll_s: float) -> None:
        self.table = table
        self.launcher = launcher
        self.node_table = node_table
        self.nodes_poll_s = nodes_poll_s
        if not node_table.update(ray.nodes()):  # nodes may still join (an autoscaler)
            log.warning("no Ray node offers the %r resource yet: the cluster is empty",
                        launcher.resource)
        self._nodes_at = time.monotonic()

    # -- where workers go -----------------------------------------------------------------------
    def cluster(self) -> Cluster:
        with self.table.lock:
            return self.node_table.cluster()

    def target(self, job_id: str, plan: WorkerPlan) -> Target:
        """The plan resolved to Ray nodes; one naming a node that has gone is packed."""
        if plan.num_workers < 1:
            raise ValueError(f"job {job_id}: a placement needs at least one worker")
        nodes = self.node_table.resolve(plan.placement)
        if nodes is None:
            count = min(plan.num_workers, max(self.node_table.total_slots, 1))
            self.table.files.note(job_id, f"placement {plan.placement} does not fit the nodes now "
                                  f"({self.node_table.cluster().describe()}); packing {count} worker(s)")
            return Target.of(plan, None, count)
        return Target.of(plan, nodes, plan.num_workers)

    def refresh(self) -> None:
        """Re-read Ray's node table every `nodes_poll_s`."""
        try:
            if time.monotonic() - self._nodes_at >= self.nodes_poll_s:
                nodes = ray.nodes()
                with self.table.lock:
                    self.node_table.update(nodes)
                self._nodes_at = time.monotonic()
        except RayError:
            pass  # the GCS is briefly unreachable: keep the last table

    # -- a job's worker set -------------------------------------------------------------------
    def workers(self, j: _Job) -> tuple[str, ...] | None:
        return j.ws.live_names if j.ws is not None else None

    def poll(self, j: _Job) -> Polled | None:
        ws = j.ws
        if ws is None:
            return None
        if not ws.started:
            if j.state is ExecState.STOPPING:  # called off before any process started
                self.table.exited(j)
            elif j.target != ws.target or (  # re-placed, or its node left, while reserving
                    ws.target.nodes is not None and not self.node_table.still_fits(ws.target.nodes)):
                self.table.requeue(j)
            elif ready(*ws.waiting):
                (self._create_actors if ws.phase == "pg" else self._start_workers)(j)
            return None
        if ws.phase == "start" and ready(*ws.starts):
            error = ws.start_error()
            if error:
                self.table.fail(j, error)
                return None
            ws.phase = "run"
        ws.collect()
        return Polled(ws.codes, ws.target)

    def signal(self, j: _Job, signum: int) -> None:
        """`signum` to the workers; a SIGKILL after the first (the job is past its stop
        deadline again) kills their actors."""
        if j.ws is None:  # (a job starting early has none yet)
            return
        if signum == signal.SIGKILL and j.killed > 0:
            j.ws.kill_actors(only_running=True)
        else:
            j.ws.signal(signum)

    def release(self, j: _Job) -> list[int] | None:
        """Kill the job's actors and free its placement groups, but those promised to a job
        starting early on them (they pass to it)."""
        ws = j.ws
        if ws is None:
            return None
        codes = [c if c is not None else LOST for c in ws.codes] if ws.started else None
        ws.release(keep=self.handed_groups())
        j.ws = None
        return codes

    def reclaim(self, job_id: str, workers: Sequence[str]) -> None:
        """Actors of an earlier executor in a Ray driver that is still alive (one whose driver
        died took its actors along: nothing is left to stop)."""
        prefix = f"corral-{job_id}-"
        actors: list[Any] = []  # (like WorkerSet.actors: ray types a handle's methods as Never)
        for name in sorted({str(w) for w in [*workers, *self.table.files.recorded_workers(job_id)]
                            if str(w).startswith(prefix)}):
            try:
                actors.append(ray.get_actor(name))
            except (ValueError, RayError):
                continue
        if not actors:
            return
        self.table.files.note(job_id, f"stopping {len(actors)} worker(s) left by an earlier service")
        waits = [a.wait.remote() for a in actors]
        for a in actors:
            a.signal.remote(signal.SIGTERM)
        ray.wait(waits, num_returns=len(waits), timeout=self.table.stop_timeout_s)
        for a in actors:
            ray.kill(a, no_restart=True)
        ray.wait(waits, num_returns=len(waits), timeout=5.0)

    # -- launching ----------------------------------------------------------------------------
    def start(self, j: _Job) -> None:
        assert j.target is not None
        if j.target.nodes is not None and not self.node_table.still_fits(j.target.nodes):
            count = min(j.target.count, max(self.node_table.total_slots, 1))
            self.table.files.note(j.launch.job_id, f"a node of its placement has left; packing {count} "
                            "worker(s) wherever they fit")
            j.target = Target.of(j.target.plan, None, count)
        try:
            j.ws = self.launcher.reserve(j.target)
        except LaunchError as exc:
            self.table.fail(j, str(exc))

    def _create_actors(self, j: _Job) -> None:
        assert j.ws is not None
        self.launcher.create_actors(j.ws, j.launch.job_id, j.launches, self.node_table)
        j.plan = WorkerPlan(j.ws.placement, j.ws.target.plan.batch)

    def _start_workers(self, j: _Job) -> None:
        """Rank 0's actor is up: start every worker with the rendezvous at its node."""
        assert j.ws is not None
        if not self.start_set(j, j.ws):
            self.table.requeue(j)
            return
        j.state, j.started_at = ExecState.RUNNING, time.time()
        j.launches += 1
        self.table.files.record_workers(j.launch.job_id, j.ws.names)

    def start_set(self, j: _Job, ws: WorkerSet, extra: dict[str, str] | None = None,
                  devices: Sequence[Sequence[str] | None] = ()) -> bool:
        """Start the workers of `ws` (its rank 0's actor is up) with the rendezvous at its node,
        `extra` variables and, per rank, the GPUs to use where given; False when rank 0's
        actor died before it answered (its node left?)."""
        job = j.launch
        try:
            master_addr, master_port = self.launcher.rendezvous(ws)
        except RayError as exc:
            self.table.files.note(job.job_id, f"worker actor lost while starting: {type(exc).__name__}")
            return False
        batch = ws.target.plan.batch
        base = {**self.table.worker_env(j, batch, ws.num_nodes, gpu=self.launcher.gpu), **(extra or {})}
        k = len(ws.actors)
        envs = [{**base, **WorkerEnv(rank=rank, world_size=k, local_rank=local_rank,
                                     local_world_size=local_size, master_addr=master_addr,
                                     master_port=master_port,
                                     backend=self.launcher.backend).to_env(),
                 ENV_GPU_TYPE: self.node_table.type_of(node)}
                for rank, (_, node, local_rank, local_size) in enumerate(ws.slots)]
        self.table.files.note(job.job_id, f"launch {j.launches}: {k} worker(s) as Ray actors on "
                        f"{ws.placement} ({self.launcher.resource})"
                        + (f", batch {batch.local_bsz}x{batch.accum_steps + 1}" if batch else "")
                        + f", rendezvous {master_addr}:{master_port}")
        self.launcher.start(ws, job.command, job.cwd, envs,
                            [str(self.table.files.log_path(job.job_id, r)) for r in range(k)], devices)
        return True

    # -- early initialisation (corral.executors.early: the sequence; ray.seats: the seats) ------
    def handed_groups(self) -> set[str]:
        """Ids of the donors' placement groups promised to jobs starting early: a donor that
        gives its slot up leaves them in place (they pass to the incoming job)."""
        return {s.pg.id.hex() for s in (self.table.early.promised_slots() if self.table.early else [])}
