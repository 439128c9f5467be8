"""`LocalExecutor`: every job's workers are processes on this machine.

    QUEUED --slots free--> RUNNING --all exit 0--> DONE
    RUNNING --new plan / stop--> STOPPING (SIGTERM; SIGKILL after stop_timeout_s)
    STOPPING --all exited--> QUEUED (restart from the checkpoint) | STOPPED
    RUNNING --a worker dies--> STOPPING --> QUEUED | FAILED (after max_retries crashes)

Workers get env:// (127.0.0.1), corral.protocol.env and GPUs (nccl) or CPU slots (gloo); files
under `<data_dir>/jobs/<job id>/`. Each worker runs in the job sandbox (corral.executors.sandbox:
its own directories, the system, nothing else of the data directory) where Landlock exists,
unless `sandbox=False`. See corral.executors.resize, .early and .procs; GPU types:
`LocalExecutor`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from corral.core.cluster import Cluster, Node, Placement
from corral.executors.backend import Polled
from corral.executors.base import ExecState, WorkerPlan
from corral.executors.early import EARLY_READY_TIMEOUT_S, EarlyStarts
from corral.executors.lifecycle import JobRecord, JobTable
from corral.executors.local_early import EarlyProcs, LocalEarlySlots
from corral.executors.local_resize import LocalInPlace
from corral.executors.procs import (
    ENV_LAUNCH_TAG,
    end_launch,
    free_port,
    is_job_worker,
    new_launch_tag,
    signal_group,
    spawn,
    stop_pids,
)
from corral.executors.resize import (
    IN_PLACE,
    InPlaceResize,
    ResizeDeadlines,
    check_mechanism,
)
from corral.executors.sandbox import available as sandbox_available
from corral.executors.sandbox import refusal as sandbox_refusal
from corral.executors.sandbox import sandboxed
from corral.executors.slots import SlotPool, detect_gpu_types, detect_gpus
from corral.protocol.env import ENV_GPU_TYPE, WorkerEnv

__all__ = ["LocalExecutor", "LocalWorkers"]


@dataclass
class _Job(JobRecord):
    target: WorkerPlan | None
    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)
    prefer: list[int] = field(default_factory=list)  # the slots it held last (kept on restart)
    tag: str | None = None  # the current launch's tag
    slots: list[int] = field(default_factory=list)  # the slot of each rank of the current launch
    resize: InPlaceResize | None = None  # an in-place resize under way
    early: EarlyProcs | None = None  # its next launch, started early


class LocalExecutor(JobTable[_Job]):
    """Runs workers as local processes: the job table over `LocalWorkers`; see the module
    docstring. GPU types: each slot has one (from nvidia-smi; CPU slots: "" or the types
    `slot_types` names, `corral serve --slots t4:2,a100:2`); the slots of one type are one node
    of `cluster()` (`localhost` with one type, else `localhost-<type>`), so a placement's nodes
    say which slots a job gets. Each worker is told its slot's type (CORRAL_GPU_TYPE); a job
    that changes nodes moves by checkpoint-restart. `resize_deadlines`: how long each phase of
    an in-place resize may take before it falls back (corral.executors.resize)."""

    name = "local"

    def __init__(self, data_dir: str | Path, *, slots: int | None = None,
                 gpus: Sequence[int] | None = None, slot_types: Sequence[str] | None = None,
                 max_retries: int = 3,
                 stop_timeout_s: float = 30.0, crash_grace_s: float = 2.0,
                 report_interval_s: float = 30.0, checkpoint_interval_s: float = 600.0,
                 poll_s: float = 0.05, node_name: str = "localhost",
                 retry_backoff_s: float = 1.0, mechanism: str = IN_PLACE,
                 early_init: bool = True,
                 early_timeout_s: float = EARLY_READY_TIMEOUT_S,
                 resize_deadlines: ResizeDeadlines | None = None,
                 sandbox: bool | None = None) -> None:
        self.data_dir = Path(data_dir)
        if sandbox and not sandbox_available():
            raise OSError("cannot sandbox jobs: this kernel has no Landlock")
        self.mechanism = check_mechanism(mechanism)
        #: the backend: slots and worker processes; jobs run in the sandbox
        #: (corral.executors.sandbox) where `sandbox`, None: where Landlock is
        self.workers = LocalWorkers(self, self.data_dir, _slot_layout(slots, gpus, slot_types),
                                    node_name, sandbox_available() if sandbox is None else sandbox)
        self.pool = self.workers.pool
        super().__init__(self.data_dir, self.workers, _Job, thread_name="corral-local-executor",
                         max_retries=max_retries, stop_timeout_s=stop_timeout_s,
                         crash_grace_s=crash_grace_s, report_interval_s=report_interval_s,
                         checkpoint_interval_s=checkpoint_interval_s, poll_s=poll_s,
                         retry_backoff_s=retry_backoff_s,
                         early=EarlyStarts(self, LocalEarlySlots(self.workers),
                                           timeout_s=early_timeout_s) if early_init else None,
                         inplace=LocalInPlace(self.workers, resize_deadlines or ResizeDeadlines())
                         if self.mechanism == IN_PLACE else None)

    def refusal(self, cwd: str) -> str | None:
        """Where jobs run in the sandbox: why it could not keep a job working in `cwd` off the
        data directory (`cwd` holds it or lies in it), as its start would say."""
        if not self.workers.sandbox:
            return None
        return sandbox_refusal(cwd, [], [], [str(self.data_dir)])


class LocalWorkers:
    """The local backend (`corral.executors.backend.Backend`): the slot pool, its nodes (one
    per slot type) and each job's worker processes (rank r on `j.slots[r]`)."""

    def __init__(self, table: JobTable[_Job], data_dir: Path,
                 layout: tuple[list[int], list[str], bool], node_name: str,
                 sandbox: bool) -> None:
        self.table = table
        self.data_dir = data_dir
        self.sandbox = sandbox
        ids, typed, gpu = layout
        #: the distinct slot types in slot order: node i of `cluster()` holds the slots of type i
        self.types = list(dict.fromkeys(typed))
        self.slot_type = dict(zip(ids, typed))
        self.pool = SlotPool(ids, gpu=gpu, nodes=[self.types.index(t) for t in typed])
        self.node_name = node_name

    # -- where workers go -----------------------------------------------------------------------
    def cluster(self) -> Cluster:
        if len(self.types) == 1:
            return Cluster((Node(self.node_name, self.pool.size, self.types[0]),))
        return Cluster(tuple(Node(f"{self.node_name}-{t or 'untyped'}", self.pool.on_node(n), t)
                             for n, t in enumerate(self.types)))

    def per_node(self, placement: Placement) -> dict[int, int]:
        """The slots `placement` takes on each node (on a one-node cluster, all on node 0,
        whichever node it names)."""
        if len(self.types) == 1:
            return {0: placement.num_gpus}
        return dict(placement.slots)

    def target(self, job_id: str, plan: WorkerPlan) -> WorkerPlan:
        if plan.num_workers < 1 or plan.num_workers > self.pool.size:
            raise ValueError(f"job {job_id}: cannot run {plan.num_workers} workers on "
                             f"{self.pool.size} slots")
        for node, count in self.per_node(plan.placement).items():
            if not 0 <= node < len(self.types) or count > self.pool.on_node(node):
                raise ValueError(f"job {job_id}: cannot run {count} workers on node {node} "
                                 f"({self.pool.on_node(node) if 0 <= node < len(self.types) else 0}"
                                 " slots)")
        return plan

    def refresh(self) -> None:
        """The slots never change."""

    # -- a job's worker set -------------------------------------------------------------------
    def workers(self, j: _Job) -> tuple[str, ...] | None:
        return tuple(str(p.pid) for p in j.procs if p.poll() is None) if j.procs else None

    def poll(self, j: _Job) -> Polled | None:
        return Polled([p.poll() for p in j.procs], j.plan) if j.procs else None

    def signal(self, j: _Job, signum: int) -> None:
        for p in j.procs:
            if p.poll() is None:
                signal_group(p.pid, signum)

    def release(self, j: _Job) -> list[int] | None:
        """Free the slots and logs first (that cannot fail), then end every process left."""
        procs, logs, tag = j.procs, j.logs, j.tag
        j.prefer = self.pool.held(j.launch.job_id)
        self.pool.release(j.launch.job_id)
        j.procs, j.logs, j.tag = [], [], None
        for f in logs:
            f.close()
        for p in procs:  # no worker is left behind in its process group
            signal_group(p.pid, signal.SIGKILL)
        if tag is not None:  # nor anything it started elsewhere (its own sessions)
            end_launch(tag)
        for p in procs:
            if p.poll() is None:
                p.wait(timeout=5)
        return [int(p.returncode) for p in procs] if procs else None

    def reclaim(self, job_id: str, workers: Sequence[str]) -> None:
        files = self.table.files
        ids = {int(w) for w in [*workers, *files.recorded_workers(job_id)] if str(w).isdigit()}
        pids = sorted(p for p in ids if is_job_worker(p, job_id))
        tag = files.recorded_tag(job_id)
        if pids:
            files.note(job_id, f"stopping {len(pids)} worker(s) left by an earlier service: {pids}")
            stop_pids(pids, self.table.stop_timeout_s)
        if tag is not None:
            stragglers = end_launch(tag)
            if stragglers:
                files.note(job_id, f"killed {len(stragglers)} process(es) its workers had "
                           f"started: {stragglers}")

    def start(self, j: _Job) -> None:
        assert j.target is not None
        slots = self.pool.acquire_on(j.launch.job_id, self.per_node(j.target.placement), j.prefer)
        if slots is not None:
            self._launch(j, j.target, slots)

    def _launch(self, j: _Job, plan: WorkerPlan, slots: list[int]) -> None:
        job, table = j.launch, self.table
        k = len(slots)
        if not os.path.isdir(job.cwd):
            self.pool.release(job.job_id)
            table.fail(j, f"cannot start: working directory {job.cwd!r} does not exist")
            return
        table.files.note(job.job_id, f"launch {j.launches}: {k} worker(s) on {'GPU' if self.pool.gpu else 'CPU'} "
                         f"slots {slots}" + (f", batch {plan.batch.local_bsz}x{plan.batch.accum_steps + 1}"
                                             if plan.batch else ""))
        j.plan, j.state, j.started_at = plan, ExecState.RUNNING, time.time()
        j.slots = list(slots)
        j.tag = new_launch_tag(job.job_id)
        try:
            self.spawn_set(j, plan, slots, free_port(), j.tag, j.procs, j.logs)
        except (OSError, ValueError) as exc:  # no such program, not executable, bad argument
            j.launches += 1
            self.release(j)  # also when no process started: the slots and the logs
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            table.fail(j, f"cannot start {job.command[0]!r}: {reason}")
            return
        j.launches += 1

    def spawn_set(self, j: _Job, plan: WorkerPlan, slots: list[int], port: int, tag: str,
                  procs: list[subprocess.Popen], logs: list[IO[bytes]],
                  extra: dict[str, str] | None = None) -> None:
        """Start the workers of the job's next launch on `slots` (rank r on slots[r]), appending
        them to `procs` and their logs to `logs` as they start (so a failure midway leaves
        what started there to release), and record them for a later service to reclaim."""
        job, k = j.launch, len(slots)
        backend = "nccl" if self.pool.gpu else "gloo"
        base = self.table.worker_env(j, plan.batch, 1, gpu=self.pool.gpu, inherit=os.environ)
        base[ENV_LAUNCH_TAG] = tag
        base.update(extra or {})
        if self.pool.gpu:
            base["CUDA_VISIBLE_DEVICES"] = ",".join(str(s) for s in slots)
        for rank in range(k):
            worker = WorkerEnv(rank=rank, world_size=k, local_rank=rank, local_world_size=k,
                               master_addr="127.0.0.1", master_port=port, backend=backend)
            log = self.table.files.open_log(job.job_id, rank)
            logs.append(log)
            argv, env = self.contained(j, {**base, **worker.to_env(),
                                           ENV_GPU_TYPE: self.slot_type[slots[rank]]})
            procs.append(spawn(argv, job.cwd, env, log))
        self.table.files.record_workers(job.job_id, [p.pid for p in procs], tag)

    def contained(self, j: _Job, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """The argv and environment a worker of `j` starts with: in the sandbox
        (corral.executors.sandbox) when this executor sandboxes, else its command as given.
        Raises PermissionError (one line) for a job the sandbox cannot keep off the data
        directory."""
        job = j.launch
        if not self.sandbox and job.run_as is None:
            return list(job.command), env
        return sandboxed(job.command, cwd=job.cwd, job_dir=str(self.table.files.dir(job.job_id)),
                         env=env, deny=[str(self.data_dir)], run_as=job.run_as,
                         landlock=self.sandbox)


def _slot_layout(slots: int | None, gpus: Sequence[int] | None,
                 slot_types: Sequence[str] | None) -> tuple[list[int], list[str], bool]:
    """The slot ids, each one's GPU type and whether they are GPUs: the `gpus` given, CPU
    `slots` (or one per `slot_types` entry), or else this machine's GPUs (nvidia-smi), or else
    a CPU slot per core. ValueError when the counts disagree."""
    typed = list(slot_types) if slot_types is not None else None
    if gpus is not None:
        ids = list(gpus)
    elif slots or typed is not None:
        ids = []  # CPU slots asked for
    else:
        ids = detect_gpus()
    gpu = bool(ids)
    if gpu and typed is None:
        typed = detect_gpu_types(ids)
    elif not gpu:
        if typed is None:
            typed = [""] * (slots or os.cpu_count() or 1)
        elif slots and slots != len(typed):
            raise ValueError(f"{slots} slots but {len(typed)} slot types")
        ids = list(range(len(typed)))
    assert typed is not None  # (given, detected, or one unnamed type per slot)
    if len(typed) != len(ids):
        raise ValueError(f"{len(ids)} GPUs but {len(typed)} slot types")
    return ids, typed, gpu
