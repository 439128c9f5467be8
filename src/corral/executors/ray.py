"""`RayExecutor`: every job's workers are Ray actors, placed with a placement group.

The same contract as the local executor (corral.executors.base), on a Ray cluster of many
machines (also on Kubernetes through KubeRay, docs/ray.md):

* **Cluster**: connects to `address` (or $RAY_ADDRESS), or starts a single-node Ray here. The
  cluster a policy sees is Ray's node table: alive nodes offering the slot resource (`GPU`, or
  `CPU`, or a custom resource name), in a stable order, refreshed every `nodes_poll_s` - nodes
  that join or leave appear or vanish (corral.executors.ray_nodes).
* **Placement**: a policy's per-node placement becomes a placement group with one bundle per
  node, pinned to that node (STRICT_PACK for one node, STRICT_SPREAD for several). A launch
  waits (QUEUED) until Ray can reserve it, e.g. while a stopping job still holds the slots.
* **Workers**: one actor per worker in its bundle (corral.executors.ray_launch builds the
  set, corral.executors.ray_worker is the actor); it runs the job's command on its node with
  the torch.distributed env:// variables - MASTER_ADDR and MASTER_PORT come from rank 0's
  actor (its node's IP and a free port there) - and CORRAL_* variables; on GPUs,
  CUDA_VISIBLE_DEVICES is what Ray assigned and the backend is nccl.
* **Resize, preemption, crashes**: the local executor's checkpoint-restart protocol, unchanged:
  SIGTERM every worker (through its actor), wait until all have exited (SIGKILL after the
  timeout), remove the placement group, start the new worker set. A worker that exits non-zero
  or whose actor dies restarts the job from its last checkpoint, at most `max_retries` times.
* **Lost nodes**: a removed node's actors die, which is a crash for its jobs; their restart
  goes to the placement they had if its nodes are all still there, otherwise the same number
  of workers (fewer if the cluster is now smaller) packed wherever they fit, until the policy
  places the job again on the cluster it now sees.
* **Storage**: checkpoints, the report, the logs and workers.json of a job live under
  `<storage>/jobs/<job id>/` (`storage` defaults to the data directory). Every node and the
  service must see this path (a shared file system on a real cluster).

Decided here (Ray is silent or the choice is ours): actors are owned by the service's Ray
driver (not detached), so a service that dies takes its workers with it (Ray's fate sharing;
ray_guard.py kills the processes) and the restarted service resumes every job from its last
checkpoint; a lost node counts as a crash towards `max_retries`; an out-of-date placement
(naming a node that has gone) is packed as above rather than refused.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import ray
from ray.exceptions import RayError

from corral.core.cluster import Cluster
from corral.core.errors import InputError
from corral.executors.base import TERMINAL, ExecState, ExecStatus, Executor, JobLaunch, WorkerPlan
from corral.executors.ray_launch import (LOST, LaunchError, Launcher, Target, WorkerSet, connect,
                                         ready)
from corral.executors.ray_nodes import NodeTable
from corral.train.env import ENV_CHECKPOINT_DIR, ENV_CONFIG, ENV_JOB_ID, WorkerEnv
from corral.train.files import atomic_write_json, read_json
from corral.train.report import REPORT_FILE, read_report

__all__ = ["RayExecutor", "connect"]

log = logging.getLogger("corral.executors.ray")
_PIDS_FILE = "workers.json"  # actor names of the current launch, for a later service to reclaim


@dataclass
class _Job:
    launch: JobLaunch
    target: Target | None
    state: ExecState = ExecState.QUEUED
    ws: WorkerSet | None = None  # the worker set being started, running or stopping
    plan: WorkerPlan | None = None  # what its workers run with (actual node indices)
    launches: int = 0
    crashes: int = 0
    exit_codes: tuple[int, ...] = ()
    message: str = ""
    reason: str = ""  # why it is stopping: resize, stop, cancel, crash, shutdown
    deadline: float = 0.0
    killed: int = 0  # escalation steps taken after the deadline
    started_at: float | None = None
    queued_at: float = field(default_factory=time.monotonic)


class RayExecutor(Executor):
    """Runs workers as Ray actors; see the module docstring.

    Options (the CLI passes them through `corral serve`): `address` (default $RAY_ADDRESS; none:
    start a single-node Ray here with `slots` CPUs), `resource` (default $CORRAL_RAY_RESOURCE,
    else GPU when the cluster has GPUs, else CPU), `storage` (default $CORRAL_RAY_STORAGE, else
    the data directory). `slots` is ignored when connecting to an existing cluster."""

    name = "ray"

    def __init__(self, data_dir: str | Path, *, address: str | None = None,
                 resource: str | None = None, storage: str | Path | None = None,
                 slots: int | None = None, gpus: Sequence[int] | None = None,
                 max_retries: int = 3, stop_timeout_s: float = 30.0, crash_grace_s: float = 2.0,
                 report_interval_s: float = 30.0, checkpoint_interval_s: float = 600.0,
                 poll_s: float = 0.05, nodes_poll_s: float = 0.5) -> None:
        if gpus:
            raise InputError("--gpus is for the local executor; on Ray the GPUs are the nodes' "
                             "(start Ray with the GPUs it should offer)")
        address = address or os.environ.get("RAY_ADDRESS") or None
        self._owns_ray = connect(address, num_cpus=slots)
        resource = resource or os.environ.get("CORRAL_RAY_RESOURCE") or (
            "GPU" if ray.cluster_resources().get("GPU", 0) >= 1 else "CPU")
        self.data_dir = Path(data_dir)
        self.storage = Path(storage or os.environ.get("CORRAL_RAY_STORAGE") or self.data_dir)
        self.max_retries = max_retries
        self.stop_timeout_s = stop_timeout_s
        self.crash_grace_s = crash_grace_s
        self.report_interval_s = report_interval_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.poll_s = poll_s
        self.nodes_poll_s = nodes_poll_s
        self.launcher = Launcher(resource, secrets.token_hex(3))
        self._table = NodeTable(resource)
        if not self._table.update(ray.nodes()):  # nodes may still join (an autoscaler)
            log.warning("no Ray node offers the %r resource yet: the cluster is empty", resource)
        self._nodes_at = time.monotonic()
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.RLock()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="corral-ray-executor", daemon=True)
        self._thread.start()

    @property
    def resource(self) -> str:
        return self.launcher.resource

    # -- the contract -------------------------------------------------------------------------
    def cluster(self) -> Cluster:
        with self._lock:
            return self._table.cluster()

    def node_ids(self) -> tuple[str, ...]:
        """Ray node ids in the order of `cluster()`'s nodes."""
        with self._lock:
            return tuple(n.node_id for n in self._table.nodes)

    def place(self, job: JobLaunch, plan: WorkerPlan) -> None:
        if plan.num_workers < 1:
            raise ValueError(f"job {job.job_id}: a placement needs at least one worker")
        with self._lock:
            target = self._resolve(job.job_id, plan)
            j = self._jobs.get(job.job_id)
            if j is None:
                self._jobs[job.job_id] = _Job(job, target)
                return
            if j.state in TERMINAL:
                return
            j.launch, j.target = job, target
            if j.state is ExecState.STOPPED:
                j.state, j.queued_at = ExecState.QUEUED, time.monotonic()
            elif j.state is ExecState.STOPPING and j.reason == "stop":
                j.reason = "resize"

    def stop(self, job_id: str) -> None:
        self._halt(job_id, "stop", ExecState.STOPPED)

    def cancel(self, job_id: str) -> None:
        self._halt(job_id, "cancel", ExecState.CANCELLED)

    def _halt(self, job_id: str, reason: str, idle_state: ExecState) -> None:
        """Stop or cancel: at once when no worker set exists, else through STOPPING (a cancel
        overrides whatever a stopping job was stopping for; a stop overrides a resize)."""
        with self._lock:
            j = self._jobs.get(job_id)
            if j is None or j.state in TERMINAL:
                return
            j.target = None
            if j.ws is None:
                j.state = idle_state
            elif j.state is not ExecState.STOPPING:
                self._terminate(j, reason, self.stop_timeout_s)
            elif reason == "cancel" or j.reason == "resize":
                j.reason = reason

    def status(self, job_id: str) -> ExecStatus:
        with self._lock:
            j = self._jobs.get(job_id)
            if j is None:
                return ExecStatus(job_id, ExecState.UNKNOWN)
            live = j.ws.live_names if j.ws else ()
            return ExecStatus(job_id, j.state, j.plan if live else None, j.launches, j.crashes,
                              j.exit_codes, j.message, live, j.started_at)

    def report(self, job_id: str) -> dict[str, Any] | None:
        return read_report(self._dir(job_id) / REPORT_FILE)

    def read_log(self, job_id: str, rank: int = 0, tail_bytes: int | None = None) -> str:
        path = self._log_path(job_id, rank)
        if not path.exists():
            return ""
        with open(path, "rb") as f:
            if tail_bytes is not None:
                f.seek(max(0, path.stat().st_size - tail_bytes))
            return f.read().decode(errors="replace")

    def checkpoint_dir(self, job_id: str) -> Path:
        return self._dir(job_id) / "checkpoints"

    def reclaim(self, job_id: str, workers: Sequence[str]) -> None:
        """Actors of an earlier executor in a Ray driver that is still alive (one whose driver
        died took its actors along: nothing is left to stop)."""
        recorded = read_json(self._dir(job_id) / _PIDS_FILE) or []
        prefix = f"corral-{job_id}-"
        actors = []
        for name in sorted({str(w) for w in [*workers, *recorded] if str(w).startswith(prefix)}):
            try:
                actors.append(ray.get_actor(name))
            except (ValueError, RayError):
                continue
        if not actors:
            return
        self._note(job_id, f"stopping {len(actors)} worker(s) left by an earlier service")
        waits = [a.wait.remote() for a in actors]
        for a in actors:
            a.signal.remote(signal.SIGTERM)
        ray.wait(waits, num_returns=len(waits), timeout=self.stop_timeout_s)
        for a in actors:
            ray.kill(a, no_restart=True)
        ray.wait(waits, num_returns=len(waits), timeout=5.0)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        with self._lock:
            for j in self._jobs.values():
                if j.ws is not None and j.state is not ExecState.STOPPING:
                    self._terminate(j, "shutdown", timeout_s)
                j.target = None
        deadline = time.monotonic() + timeout_s + 5
        while time.monotonic() < deadline:
            with self._lock:
                if not any(j.ws for j in self._jobs.values()):
                    break
            time.sleep(self.poll_s)
        self._closing.set()
        self._thread.join(timeout=10)
        with self._lock:
            for j in self._jobs.values():
                if j.ws is not None:
                    j.ws.release()
                    j.ws = None
        if self._owns_ray:
            ray.shutdown()

    # -- the background loop ------------------------------------------------------------------
    def _run(self) -> None:
        while not self._closing.is_set():
            try:
                if time.monotonic() - self._nodes_at >= self.nodes_poll_s:
                    nodes = ray.nodes()
                    with self._lock:
                        self._table.update(nodes)
                    self._nodes_at = time.monotonic()
            except RayError:
                pass  # the GCS is briefly unreachable: keep the last table
            with self._lock:
                for j in list(self._jobs.values()):
                    try:
                        self._advance(j)
                    except Exception as exc:  # noqa: BLE001 - one job must not stop the others
                        j.message = f"executor error: {type(exc).__name__}: {exc}".splitlines()[0]
                        self._note(j.launch.job_id, j.message)
                self._start_queued()
            self._closing.wait(self.poll_s)

    def _advance(self, j: _Job) -> None:
        ws = j.ws
        if ws is None:
            return
        if not ws.started:
            if j.state is ExecState.STOPPING:  # called off before any process started
                self._exited(j)
            elif j.target != ws.target or (  # re-placed, or its node left, while reserving
                    ws.target.nodes is not None and not self._table.still_fits(ws.target.nodes)):
                self._requeue(j)
            elif ready(ws.waiting):
                (self._create_actors if ws.phase == "pg" else self._start_workers)(j)
            return
        if ws.phase == "start" and ready(*ws.starts):
            error = ws.start_error()
            if error:
                self._fail(j, error)
                return
            ws.phase = "run"
        ws.collect()
        codes = ws.codes
        if j.state is ExecState.RUNNING:
            if ws.all_exited():
                self._exited(j)
            elif any(c not in (None, 0) for c in codes):
                bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
                self._note(j.launch.job_id, f"worker(s) failed (rank, status): {bad}"
                           + _lost_note([c for _, c in bad]) + "; stopping the rest")
                self._terminate(j, "crash", self.crash_grace_s)
            elif j.target is not None and j.target != ws.target:
                self._terminate(j, "resize", self.stop_timeout_s)
        elif j.state is ExecState.STOPPING:
            if ws.all_exited():
                self._exited(j)
            elif time.monotonic() > j.deadline:  # SIGKILL the workers, then kill their actors
                if j.killed == 0:
                    ws.signal(signal.SIGKILL)
                else:
                    ws.kill_actors(only_running=True)
                j.killed += 1
                j.deadline = time.monotonic() + 5.0

    def _exited(self, j: _Job) -> None:
        """The current worker set is gone (or was called off before it started): what next."""
        job_id = j.launch.job_id
        started = j.ws.started
        codes = [c if c is not None else LOST for c in j.ws.codes]
        j.ws.release()
        j.ws = None
        reason, j.reason = (j.reason if j.state is ExecState.STOPPING else ""), ""
        if started:
            j.exit_codes = tuple(codes)
            self._note(job_id, f"launch {j.launches - 1} exited with {codes}"
                       + (f" ({reason})" if reason else "") + _lost_note(codes))
            if reason != "cancel" and (all(c == 0 for c in codes) or self._reported_finished(j)):
                j.state = ExecState.DONE
                return
        if reason == "cancel":
            j.state = ExecState.CANCELLED
            return
        if started and reason in ("", "crash"):
            j.crashes += 1
            if j.crashes > self.max_retries:
                j.state = ExecState.FAILED
                j.message = (f"workers failed {j.crashes} times (exit statuses "
                             f"{list(j.exit_codes)}); see its log")
                self._note(job_id, j.message)
                return
            self._note(job_id, f"restarting from the last checkpoint (retry {j.crashes} of "
                       f"{self.max_retries})")
        if j.target is not None:
            j.state, j.queued_at = ExecState.QUEUED, time.monotonic()
        else:
            j.state = ExecState.STOPPED

    def _reported_finished(self, j: _Job) -> bool:
        """The launch that just exited reported that training finished (see LocalExecutor)."""
        report = self.report(j.launch.job_id)
        return bool(report and report.get("state") == "finished"
                    and report.get("launch") == j.launches - 1)

    def _terminate(self, j: _Job, reason: str, timeout_s: float) -> None:
        j.state, j.reason, j.killed = ExecState.STOPPING, reason, 0
        j.deadline = time.monotonic() + timeout_s
        if j.ws is not None:
            j.ws.signal(signal.SIGTERM)

    def _requeue(self, j: _Job) -> None:
        j.ws.release()
        j.ws = None
        j.state, j.queued_at = ExecState.QUEUED, time.monotonic()

    def _fail(self, j: _Job, message: str) -> None:
        if j.ws is not None:
            j.ws.release()
            j.ws = None
        j.state, j.message = ExecState.FAILED, message
        self._note(j.launch.job_id, message)

    # -- launching ----------------------------------------------------------------------------
    def _resolve(self, job_id: str, plan: WorkerPlan) -> Target:
        nodes = self._table.resolve(plan.placement)
        if nodes is None:
            count = min(plan.num_workers, max(self._table.total_slots, 1))
            self._note(job_id, f"placement {plan.placement} does not fit the nodes now "
                       f"({self._table.cluster().describe()}); packing {count} worker(s)")
            return Target.of(plan, None, count)
        return Target.of(plan, nodes, plan.num_workers)

    def _start_queued(self) -> None:
        queued = sorted((j for j in self._jobs.values()
                         if j.state is ExecState.QUEUED and j.ws is None), key=lambda j: j.queued_at)
        for j in queued:
            if j.target is None:
                j.state = ExecState.STOPPED
                continue
            if j.target.nodes is not None and not self._table.still_fits(j.target.nodes):
                count = min(j.target.count, max(self._table.total_slots, 1))
                self._note(j.launch.job_id, f"a node of its placement has left; packing {count} "
                           "worker(s) wherever they fit")
                j.target = Target.of(j.target.plan, None, count)
            try:
                j.ws = self.launcher.reserve(j.target)
            except LaunchError as exc:
                self._fail(j, str(exc))

    def _create_actors(self, j: _Job) -> None:
        self.launcher.create_actors(j.ws, j.launch.job_id, j.launches, self._table)
        j.plan = WorkerPlan(j.ws.placement, j.ws.target.plan.batch)

    def _start_workers(self, j: _Job) -> None:
        """Rank 0's actor is up: start every worker with the rendezvous at its node."""
        ws, job = j.ws, j.launch
        try:
            master_addr, master_port = self.launcher.rendezvous(ws)
        except RayError as exc:  # rank 0's actor died before it answered (its node left?)
            self._note(job.job_id, f"worker actor lost while starting: {type(exc).__name__}")
            self._requeue(j)
            return
        jdir, ckpt = self._dir(job.job_id), self.checkpoint_dir(job.job_id)
        ckpt.mkdir(parents=True, exist_ok=True)
        batch = ws.target.plan.batch
        config = job.config.replace(
            job_id=job.job_id, num_nodes=ws.num_nodes, launch=j.launches,
            batch=(batch.local_bsz, batch.accum_steps) if batch else None,
            checkpoint_dir=str(ckpt), report_path=str(jdir / REPORT_FILE),
            report_interval_s=self.report_interval_s,
            checkpoint_interval_s=self.checkpoint_interval_s)
        base = {**job.env, ENV_JOB_ID: job.job_id, ENV_CHECKPOINT_DIR: str(ckpt),
                ENV_CONFIG: config.to_json(), "PYTHONUNBUFFERED": "1"}
        if not self.launcher.gpu:
            base["CUDA_VISIBLE_DEVICES"] = ""
            for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                base.setdefault(var, "1")
        k = len(ws.actors)
        envs = [{**base, **WorkerEnv(rank=rank, world_size=k, local_rank=local_rank,
                                     local_world_size=local_size, master_addr=master_addr,
                                     master_port=master_port,
                                     backend=self.launcher.backend).to_env()}
                for rank, (_, _, local_rank, local_size) in enumerate(ws.slots)]
        self._note(job.job_id, f"launch {j.launches}: {k} worker(s) as Ray actors on "
                   f"{ws.placement} ({self.resource})"
                   + (f", batch {batch.local_bsz}x{batch.accum_steps + 1}" if batch else "")
                   + f", rendezvous {master_addr}:{master_port}")
        self.launcher.start(ws, job.command, job.cwd, envs,
                            [str(self._log_path(job.job_id, r)) for r in range(k)])
        j.state, j.started_at, j.killed = ExecState.RUNNING, time.time(), 0
        j.launches += 1
        atomic_write_json(jdir / _PIDS_FILE, ws.names)

    # -- files --------------------------------------------------------------------------------
    def _dir(self, job_id: str) -> Path:
        path = self.storage / "jobs" / job_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _log_path(self, job_id: str, rank: int) -> Path:
        return self._dir(job_id) / ("job.log" if rank == 0 else f"worker-{rank}.log")

    def _note(self, job_id: str, text: str) -> None:
        with open(self._log_path(job_id, 0), "a") as f:
            f.write(f"[corral {time.strftime('%H:%M:%S')}] {text}\n")


def _lost_note(codes: Sequence[int]) -> str:
    return " - worker(s) lost: their node left or their actor died" if LOST in codes else ""
