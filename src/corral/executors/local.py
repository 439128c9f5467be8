"""`LocalExecutor`: every job's workers are processes on this machine.

One background thread drives each job through the contract's states (corral.executors.base):

    QUEUED --slots free--> RUNNING --all exit 0--> DONE
    RUNNING --new plan / stop--> STOPPING (SIGTERM; SIGKILL after stop_timeout_s)
    STOPPING --all exited--> QUEUED (new plan: restart from the checkpoint) | STOPPED
    RUNNING --a worker dies--> STOPPING (the others are killed after crash_grace_s)
        --> QUEUED (restart from the last checkpoint) | FAILED (after max_retries crashes)

Worker r of a K-worker launch gets the torch.distributed env:// variables (MASTER_ADDR
127.0.0.1, a fresh port), CORRAL_* variables (corral.train.env) and its devices: on GPUs,
CUDA_VISIBLE_DEVICES lists the job's GPUs (LOCAL_RANK indexes them) and the backend is nccl;
on CPU slots, no GPU, one BLAS thread and gloo. A new launch waits until the slots it needs
are no longer held by a job that is still stopping. Per-job files live under
`<data_dir>/jobs/<job id>/`: job.log (rank 0 and the executor's notes), worker-<r>.log,
report.json, checkpoints/, workers.json (the pids of the latest launch, written as it starts, so
that a service killed before it recorded them can still reclaim them).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Sequence

from corral.core.cluster import Cluster, Node
from corral.executors.base import ExecState, ExecStatus, Executor, JobLaunch, WorkerPlan, TERMINAL
from corral.executors.procs import free_port, is_job_worker, signal_group, spawn, stop_pids
from corral.executors.slots import SlotPool, detect_gpus
from corral.train.env import ENV_CHECKPOINT_DIR, ENV_CONFIG, ENV_JOB_ID, WorkerEnv
from corral.train.files import atomic_write_json, read_json
from corral.train.report import REPORT_FILE, read_report

__all__ = ["LocalExecutor"]

_PIDS_FILE = "workers.json"  # pids of the current launch, for a later service to reclaim


@dataclass
class _Job:
    launch: JobLaunch
    target: WorkerPlan | None
    state: ExecState = ExecState.QUEUED
    plan: WorkerPlan | None = None
    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)
    launches: int = 0
    crashes: int = 0
    exit_codes: tuple[int, ...] = ()
    message: str = ""
    reason: str = ""  # why it is stopping: resize, stop, cancel, crash, shutdown
    deadline: float = 0.0
    started_at: float | None = None
    queued_at: float = field(default_factory=time.monotonic)
    prefer: list[int] = field(default_factory=list)


class LocalExecutor(Executor):
    """Runs workers as local processes; see the module docstring."""

    name = "local"

    def __init__(self, data_dir: str | Path, *, slots: int | None = None,
                 gpus: Sequence[int] | None = None, max_retries: int = 3,
                 stop_timeout_s: float = 30.0, crash_grace_s: float = 2.0,
                 report_interval_s: float = 30.0, checkpoint_interval_s: float = 600.0,
                 poll_s: float = 0.05, node_name: str = "localhost") -> None:
        self.data_dir = Path(data_dir)
        ids = list(gpus) if gpus is not None else ([] if slots else detect_gpus())
        if ids:
            self.pool = SlotPool(ids, gpu=True)
        else:
            self.pool = SlotPool(range(slots or os.cpu_count() or 1), gpu=False)
        self.max_retries = max_retries
        self.stop_timeout_s = stop_timeout_s
        self.crash_grace_s = crash_grace_s
        self.report_interval_s = report_interval_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.poll_s = poll_s
        self.node_name = node_name
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.RLock()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="corral-local-executor", daemon=True)
        self._thread.start()

    # -- the contract -------------------------------------------------------------------------
    def cluster(self) -> Cluster:
        return Cluster((Node(self.node_name, self.pool.size),))

    def place(self, job: JobLaunch, plan: WorkerPlan) -> None:
        if plan.num_workers < 1 or plan.num_workers > self.pool.size:
            raise ValueError(f"job {job.job_id}: cannot run {plan.num_workers} workers on "
                             f"{self.pool.size} slots")
        with self._lock:
            j = self._jobs.get(job.job_id)
            if j is None:
                self._jobs[job.job_id] = _Job(job, plan)
                return
            if j.state in TERMINAL:
                return
            j.launch, j.target = job, plan
            if j.state is ExecState.STOPPED:
                j.state, j.queued_at = ExecState.QUEUED, time.monotonic()
            elif j.state is ExecState.STOPPING and j.reason == "stop":
                j.reason = "resize"

    def stop(self, job_id: str) -> None:
        with self._lock:
            j = self._jobs.get(job_id)
            if j is None or j.state in TERMINAL:
                return
            j.target = None
            if j.state is ExecState.QUEUED:
                j.state = ExecState.STOPPED
            elif j.state is ExecState.RUNNING:
                self._terminate(j, "stop", self.stop_timeout_s)
            elif j.state is ExecState.STOPPING and j.reason == "resize":
                j.reason = "stop"

    def cancel(self, job_id: str) -> None:
        with self._lock:
            j = self._jobs.get(job_id)
            if j is None or j.state in TERMINAL:
                return
            j.target = None
            if j.procs:
                if j.state is ExecState.STOPPING:
                    j.reason = "cancel"
                else:
                    self._terminate(j, "cancel", self.stop_timeout_s)
            else:
                j.state = ExecState.CANCELLED

    def status(self, job_id: str) -> ExecStatus:
        with self._lock:
            j = self._jobs.get(job_id)
            if j is None:
                return ExecStatus(job_id, ExecState.UNKNOWN)
            return ExecStatus(job_id, j.state, j.plan if j.procs else None, j.launches, j.crashes,
                              j.exit_codes, j.message,
                              tuple(str(p.pid) for p in j.procs if p.poll() is None),
                              j.started_at)

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
        recorded = read_json(self._dir(job_id) / _PIDS_FILE) or []
        ids = {int(w) for w in [*workers, *recorded] if str(w).isdigit()}
        pids = sorted(p for p in ids if is_job_worker(p, job_id))
        if pids:
            self._note(job_id, f"stopping {len(pids)} worker(s) left by an earlier service: {pids}")
            stop_pids(pids, self.stop_timeout_s)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        with self._lock:
            for j in self._jobs.values():
                if j.procs and j.state is not ExecState.STOPPING:
                    self._terminate(j, "shutdown", timeout_s)
                j.target = None
        deadline = time.monotonic() + timeout_s + 5
        while time.monotonic() < deadline:
            with self._lock:
                if not any(j.procs for j in self._jobs.values()):
                    break
            time.sleep(self.poll_s)
        self._closing.set()
        self._thread.join(timeout=5)
        with self._lock:
            for j in self._jobs.values():
                for p in j.procs:
                    signal_group(p.pid, signal.SIGKILL)
                self._close_logs(j)

    # -- the background loop ------------------------------------------------------------------
    def _run(self) -> None:
        while not self._closing.is_set():
            with self._lock:
                for j in list(self._jobs.values()):
                    try:
                        self._advance(j)
                    except Exception as exc:  # noqa: BLE001 - one job must not stop the others
                        j.message = f"executor error: {exc}"
                        self._note(j.launch.job_id, j.message)
                self._start_queued()
            self._closing.wait(self.poll_s)

    def _advance(self, j: _Job) -> None:
        if not j.procs:
            return
        codes = [p.poll() for p in j.procs]
        now = time.monotonic()
        if j.state is ExecState.RUNNING:
            if all(c is not None for c in codes):
                self._exited(j, codes)
            elif any(c not in (None, 0) for c in codes):
                bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
                self._note(j.launch.job_id, f"worker(s) failed (rank, status): {bad}; stopping the rest")
                self._terminate(j, "crash", self.crash_grace_s)
            elif j.target is not None and j.target != j.plan:
                self._terminate(j, "resize", self.stop_timeout_s)
        elif j.state is ExecState.STOPPING:
            if all(c is not None for c in codes):
                self._exited(j, codes)
            elif now > j.deadline:
                for p, c in zip(j.procs, codes):
                    if c is None:
                        signal_group(p.pid, signal.SIGKILL)
                j.deadline = now + 3600  # killed; wait for the exit to be reaped

    def _exited(self, j: _Job, codes: list[int | None]) -> None:
        """Every worker of the current launch has exited: decide what comes next."""
        job_id = j.launch.job_id
        j.exit_codes = tuple(int(c) for c in codes)
        for p in j.procs:  # no worker is left behind in its process group
            signal_group(p.pid, signal.SIGKILL)
        j.prefer = self.pool.held(job_id)
        self.pool.release(job_id)
        j.procs = []
        self._close_logs(j)
        reason, j.reason = (j.reason if j.state is ExecState.STOPPING else ""), ""
        self._note(job_id, f"launch {j.launches - 1} exited with {list(j.exit_codes)}"
                   + (f" ({reason})" if reason else ""))
        if reason != "cancel" and (all(c == 0 for c in j.exit_codes) or self._reported_finished(j)):
            j.state = ExecState.DONE
            return
        if reason == "cancel":
            j.state = ExecState.CANCELLED
            return
        if reason in ("", "crash"):
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
        """The launch that just exited reported that training finished (a signal may have
        caught it while the interpreter was shutting down, turning status 0 into -15)."""
        report = self.report(j.launch.job_id)
        return bool(report and report.get("state") == "finished"
                    and report.get("launch") == j.launch.config.launch + j.launches - 1)

    def _terminate(self, j: _Job, reason: str, timeout_s: float) -> None:
        j.state, j.reason = ExecState.STOPPING, reason
        j.deadline = time.monotonic() + timeout_s
        for p in j.procs:
            if p.poll() is None:
                signal_group(p.pid, signal.SIGTERM)

    def _start_queued(self) -> None:
        queued = sorted((j for j in self._jobs.values() if j.state is ExecState.QUEUED),
                        key=lambda j: j.queued_at)
        for j in queued:
            if j.target is None:
                j.state = ExecState.STOPPED
                continue
            slots = self.pool.acquire(j.launch.job_id, j.target.num_workers, j.prefer)
            if slots is not None:
                self._launch(j, j.target, slots)

    def _launch(self, j: _Job, plan: WorkerPlan, slots: list[int]) -> None:
        job = j.launch
        jdir = self._dir(job.job_id)
        ckpt = self.checkpoint_dir(job.job_id)
        ckpt.mkdir(parents=True, exist_ok=True)
        k = len(slots)
        config = job.config.replace(
            job_id=job.job_id, num_nodes=1, launch=job.config.launch + j.launches,
            batch=(plan.batch.local_bsz, plan.batch.accum_steps) if plan.batch else None,
            checkpoint_dir=str(ckpt), report_path=str(jdir / REPORT_FILE),
            report_interval_s=self.report_interval_s,
            checkpoint_interval_s=self.checkpoint_interval_s)
        port = free_port()
        backend = "nccl" if self.pool.gpu else "gloo"
        base = {**os.environ, **job.env, ENV_JOB_ID: job.job_id, ENV_CHECKPOINT_DIR: str(ckpt),
                ENV_CONFIG: config.to_json(), "PYTHONUNBUFFERED": "1"}
        if self.pool.gpu:
            base["CUDA_VISIBLE_DEVICES"] = ",".join(str(s) for s in slots)
        else:
            base["CUDA_VISIBLE_DEVICES"] = ""
            for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                base.setdefault(var, "1")
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
            atomic_write_json(jdir / _PIDS_FILE, [p.pid for p in j.procs])
        except OSError as exc:
            for p in j.procs:
                signal_group(p.pid, signal.SIGKILL)
                p.wait()
            j.procs = []
            self._close_logs(j)
            self.pool.release(job.job_id)
            j.state = ExecState.FAILED
            j.message = f"cannot start {job.command[0]!r}: {exc.strerror or exc}"
            self._note(job.job_id, j.message)

    # -- files --------------------------------------------------------------------------------
    def _dir(self, job_id: str) -> Path:
        path = self.data_dir / "jobs" / job_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _log_path(self, job_id: str, rank: int) -> Path:
        return self._dir(job_id) / ("job.log" if rank == 0 else f"worker-{rank}.log")

    def _note(self, job_id: str, text: str) -> None:
        with open(self._log_path(job_id, 0), "a") as f:
            f.write(f"[corral {time.strftime('%H:%M:%S')}] {text}\n")

    @staticmethod
    def _close_logs(j: _Job) -> None:
        for f in j.logs:
            f.close()
        j.logs = []
