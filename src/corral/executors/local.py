"""`LocalExecutor`: every job's workers are processes on this machine.

One background thread drives each job through the contract's states (corral.executors.base):

    QUEUED --slots free--> RUNNING --all exit 0--> DONE
    RUNNING --new plan / stop--> STOPPING (SIGTERM; SIGKILL after stop_timeout_s)
    STOPPING --all exited--> QUEUED (new plan: restart from the checkpoint) | STOPPED
    RUNNING --a worker dies--> STOPPING (the others are killed after crash_grace_s)
        --> QUEUED (restart from the last checkpoint) | FAILED (after max_retries crashes)

Worker r of a K-worker launch gets the torch.distributed env:// variables (MASTER_ADDR
127.0.0.1, a fresh port), CORRAL_* variables (corral.protocol.env) and its devices: on GPUs,
CUDA_VISIBLE_DEVICES lists the job's GPUs (LOCAL_RANK indexes them) and the backend is nccl;
on CPU slots, no GPU, one BLAS thread and gloo. A new launch waits until the slots it needs
are no longer held by a job that is still stopping. Per-job files live under
`<data_dir>/jobs/<job id>/`: job.log (rank 0 and the executor's notes), worker-<r>.log,
report.json, checkpoints/, workers.json and launch.tag (the pids and the tag of the latest
launch, written as it starts, so that a service killed before it recorded them can still reclaim
them).

Every launch is contained (corral.executors.procs): its workers lead sessions of their own and
carry a launch tag that all their descendants inherit; releasing a launch, whatever ended it,
kills every process still carrying its tag, torchrun's trainers included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Sequence

from corral.core.cluster import Cluster, Node
from corral.executors.base import ExecState, WorkerPlan
from corral.executors.lifecycle import JobRecord, JobTableExecutor
from corral.executors.procs import (ENV_LAUNCH_TAG, end_launch, free_port, is_job_worker,
                                   new_launch_tag, signal_group, spawn, stop_pids)
from corral.executors.slots import SlotPool, detect_gpus
from corral.protocol.env import WorkerEnv

__all__ = ["LocalExecutor"]


@dataclass
class _Job(JobRecord):
    target: WorkerPlan | None
    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)
    prefer: list[int] = field(default_factory=list)  # the slots it held last (kept on restart)
    tag: str | None = None  # the current launch's tag


class LocalExecutor(JobTableExecutor[_Job]):
    """Runs workers as local processes; see the module docstring."""

    name = "local"
    _job_type = _Job

    def __init__(self, data_dir: str | Path, *, slots: int | None = None,
                 gpus: Sequence[int] | None = None, max_retries: int = 3,
                 stop_timeout_s: float = 30.0, crash_grace_s: float = 2.0,
                 report_interval_s: float = 30.0, checkpoint_interval_s: float = 600.0,
                 poll_s: float = 0.05, node_name: str = "localhost",
                 retry_backoff_s: float = 1.0) -> None:
        self.data_dir = Path(data_dir)
        ids = list(gpus) if gpus is not None else ([] if slots else detect_gpus())
        if ids:
            self.pool = SlotPool(ids, gpu=True)
        else:
            self.pool = SlotPool(range(slots or os.cpu_count() or 1), gpu=False)
        self.node_name = node_name
        super().__init__(self.data_dir, thread_name="corral-local-executor",
                         max_retries=max_retries, stop_timeout_s=stop_timeout_s,
                         crash_grace_s=crash_grace_s, report_interval_s=report_interval_s,
                         checkpoint_interval_s=checkpoint_interval_s, poll_s=poll_s,
                         retry_backoff_s=retry_backoff_s)

    # -- the contract (the rest is JobTableExecutor's) ------------------------------------------
    def cluster(self) -> Cluster:
        return Cluster((Node(self.node_name, self.pool.size),))

    def reclaim(self, job_id: str, workers: Sequence[str]) -> None:
        ids = {int(w) for w in [*workers, *self._recorded_workers(job_id)] if str(w).isdigit()}
        pids = sorted(p for p in ids if is_job_worker(p, job_id))
        tag = self._recorded_tag(job_id)
        if pids:
            self._note(job_id, f"stopping {len(pids)} worker(s) left by an earlier service: {pids}")
            stop_pids(pids, self.stop_timeout_s)
        if tag is not None:
            stragglers = end_launch(tag)
            if stragglers:
                self._note(job_id, f"killed {len(stragglers)} process(es) its workers had "
                           f"started: {stragglers}")

    # -- hooks --------------------------------------------------------------------------------
    def _target_for(self, job_id: str, plan: WorkerPlan) -> WorkerPlan:
        if plan.num_workers < 1 or plan.num_workers > self.pool.size:
            raise ValueError(f"job {job_id}: cannot run {plan.num_workers} workers on "
                             f"{self.pool.size} slots")
        return plan

    def _has_workers(self, j: _Job) -> bool:
        return bool(j.procs)

    def _live_workers(self, j: _Job) -> tuple[str, ...]:
        return tuple(str(p.pid) for p in j.procs if p.poll() is None)

    def _advance(self, j: _Job) -> None:
        if j.procs:
            self._watch(j, [p.poll() for p in j.procs], j.plan)

    def _signal(self, j: _Job, signum: int) -> None:
        for p in j.procs:
            if p.poll() is None:
                signal_group(p.pid, signum)

    def _escalate(self, j: _Job) -> None:
        self._signal(j, signal.SIGKILL)
        j.deadline = time.monotonic() + 3600  # killed; wait for the exit to be reaped

    def _final_codes(self, j: _Job) -> list[int]:
        return [int(p.returncode) for p in j.procs]

    def _release(self, j: _Job) -> None:
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

    def _try_start(self, j: _Job) -> None:
        slots = self.pool.acquire(j.launch.job_id, j.target.num_workers, j.prefer)
        if slots is not None:
            self._launch(j, j.target, slots)

    def _launch(self, j: _Job, plan: WorkerPlan, slots: list[int]) -> None:
        job = j.launch
        k = len(slots)
        if not os.path.isdir(job.cwd):
            self.pool.release(job.job_id)
            self._fail(j, f"cannot start: working directory {job.cwd!r} does not exist")
            return
        port = free_port()
        backend = "nccl" if self.pool.gpu else "gloo"
        base = self._worker_env(j, plan.batch, 1, gpu=self.pool.gpu, inherit=os.environ)
        j.tag = base[ENV_LAUNCH_TAG] = new_launch_tag(job.job_id)
        if self.pool.gpu:
            base["CUDA_VISIBLE_DEVICES"] = ",".join(str(s) for s in slots)
        self._note(job.job_id, f"launch {j.launches}: {k} worker(s) on {'GPU' if self.pool.gpu else 'CPU'} "
                   f"slots {slots}" + (f", batch {plan.batch.local_bsz}x{plan.batch.accum_steps + 1}"
                                       if plan.batch else ""))
        j.plan, j.state, j.started_at = plan, ExecState.RUNNING, time.time()
        j.launches += 1
        try:
            for rank in range(k):
                worker = WorkerEnv(rank=rank, world_size=k, local_rank=rank, local_world_size=k,
                                   master_addr="127.0.0.1", master_port=port, backend=backend)
                log = open(self._log_path(job.job_id, rank), "ab")
                j.logs.append(log)
                j.procs.append(spawn(job.command, job.cwd, {**base, **worker.to_env()}, log))
            self._record_workers(job.job_id, [p.pid for p in j.procs], j.tag)
        except (OSError, ValueError) as exc:  # no such program, not executable, bad argument
            self._release(j)  # also when no process started: the slots and the logs
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self._fail(j, f"cannot start {job.command[0]!r}: {reason}")
