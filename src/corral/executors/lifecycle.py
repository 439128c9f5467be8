"""`JobTable`: the executor of backends that run commands, over a table of job records.

It holds what does not depend on how workers run: the contract's bookkeeping, the background
thread, what follows a worker set's exit and launch environments. It is composed, not
subclassed: a `Backend` (corral.executors.backend: where workers go, how a worker set starts, is
watched, signalled and ended), the per-job files (`JobFiles`, under `<root>/jobs/<job id>/`),
and optionally early starts (`EarlyStarts`, corral.executors.early) and in-place resizes (an
`InPlaceResizer`, corral.executors.resize); state machine: corral.executors.local. A round
inside `applying()` holds the thread off so its next pass sees the round whole. Each per-job
step runs under `guarded`: an exception fails that job, not the thread. Retry n waits
`retry_backoff_s * 2**(n-1)` s (at most `MAX_BACKOFF_S`). A stopping job past its deadline gets
SIGKILL, again every `KILL_WAIT_S` (the Ray backend then kills its actors). The service's
secrets (SERVICE_ENV) never reach workers.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from corral.core.cluster import Cluster
from corral.core.jobs import BatchConfig
from corral.executors.base import TERMINAL, ExecState, ExecStatus, Executor, JobLaunch, WorkerPlan
from corral.executors.jobfiles import JobFiles
from corral.protocol.env import ENV_CHECKPOINT_DIR, ENV_CONFIG, ENV_JOB_ID
from corral.protocol.inplace import ENV_CONTROL_DIR

if TYPE_CHECKING:
    from corral.executors.backend import Backend
    from corral.executors.early import EarlyStarts
    from corral.executors.resize import InPlaceResizer

__all__ = ["JobRecord", "JobTable", "SERVICE_ENV", "MAX_BACKOFF_S", "LOST", "lost_note"]

#: Variables of the service's environment that are its own (its token, where clients find it):
#: removed from what workers inherit.
SERVICE_ENV = ("CORRAL_TOKEN", "CORRAL_URL", "CORRAL_HOME")
MAX_BACKOFF_S = 300.0  # the longest wait before a crash retry
KILL_WAIT_S = 5.0  # after a SIGKILL, how long before the next escalation step
LOST = -128  # exit status recorded for a worker whose actor died (Ray): no real status
log = logging.getLogger("corral.executors")


@dataclass
class JobRecord:
    """What the table knows of one job; a backend's record adds its worker set."""

    launch: JobLaunch
    target: Any  # where it should run now, in the executor's terms (None: nowhere)
    state: ExecState = ExecState.QUEUED
    plan: WorkerPlan | None = None  # what its workers run with
    launches: int = 0
    crashes: int = 0
    exit_codes: tuple[int, ...] = ()
    message: str = ""
    reason: str = ""  # why it is stopping: resize, stop, cancel, crash, shutdown
    deadline: float = 0.0
    killed: int = 0  # escalation steps taken after the deadline
    started_at: float | None = None
    queued_at: float = field(default_factory=time.monotonic)
    not_before: float = 0.0  # monotonic time before which it is not started (retry back-off)
    resize: Any = None  # an in-place resize under way (the executor's record of it)
    early: Any = None  # its next launch, started early (corral.executors.early; QUEUED meanwhile)
    no_early_for: int = -1  # the launch number whose early start was called off (not retried)
    events: list[tuple[str, str]] = field(default_factory=list)  # see ExecStatus.events


J = TypeVar("J", bound=JobRecord)


class JobTable(Executor, Generic[J]):
    """The shared lifecycle over `backend`'s worker sets (see the module docstring); a job's
    record is a `record` (the backend's `JobRecord`). Starts its background thread."""

    name = "job-table"

    def __init__(self, root: Path, backend: Backend[J], record: type[J], *, thread_name: str,
                 max_retries: int, stop_timeout_s: float, crash_grace_s: float,
                 report_interval_s: float, checkpoint_interval_s: float, poll_s: float,
                 retry_backoff_s: float = 1.0, join_timeout_s: float = 5.0,
                 early: EarlyStarts[J] | None = None,
                 inplace: InPlaceResizer[J] | None = None) -> None:
        self.backend = backend
        self.record = record
        self._files = JobFiles(root)  # every job's files under root/jobs/
        self.max_retries = max_retries
        self.retry_backoff_s = retry_backoff_s
        self.last_round: float | None = time.monotonic()
        self.stop_timeout_s = stop_timeout_s
        self.crash_grace_s = crash_grace_s
        self.report_interval_s = report_interval_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.poll_s = poll_s
        self.join_timeout_s = join_timeout_s  # how long shutdown waits for the background thread
        self._jobs: dict[str, J] = {}
        #: starts jobs early on slots others give up (corral.executors.early); None: never
        self.early = early
        #: resizes running jobs in place where they allow it (corral.executors.resize); None:
        #: every resize is checkpoint-restart
        self.inplace = inplace
        self.lock = threading.RLock()  # the table and the backend's books (backends take it too)
        self._round_open = False  # inside `applying()`: stops wait for the next pass
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    # -- the contract -------------------------------------------------------------------------
    def place(self, job: JobLaunch, plan: WorkerPlan) -> None:
        with self.lock:
            target = self.backend.target(job.job_id, plan)
            j = self._jobs.get(job.job_id)
            if j is None:
                self._jobs[job.job_id] = self.record(job, target)
                return
            if j.state in TERMINAL:
                return
            j.launch, j.target = job, target
            if j.state is ExecState.STOPPED:
                j.state, j.queued_at = ExecState.QUEUED, time.monotonic()
            elif j.state is ExecState.STOPPING and j.reason == "stop":
                j.reason = "resize"

    @contextlib.contextmanager
    def applying(self) -> Iterator[None]:
        """Hold the background thread off while a round is applied, so its next pass sees the
        whole round (which job takes the slots another gives up)."""
        with self.lock:
            self._round_open = True
            try:
                yield
            finally:
                self._round_open = False

    def stop(self, job_id: str, *, cancel: bool = False) -> None:
        """Stop or cancel: at once when no worker set exists, else through STOPPING (a cancel
        overrides whatever a stopping job was stopping for; a stop overrides a resize)."""
        reason, idle_state = (("cancel", ExecState.CANCELLED) if cancel
                              else ("stop", ExecState.STOPPED))
        with self.lock:
            j = self._jobs.get(job_id)
            if j is None or j.state in TERMINAL:
                return
            j.target = None
            if not self.has_workers(j):
                j.state = idle_state
            elif reason == "stop" and j.state is ExecState.RUNNING and self._round_open \
                    and self.early is not None:
                pass  # its next pass stops it (`_watch`), unless a job starts early on its slots
            elif j.state is not ExecState.STOPPING:
                self.guarded(j, f"cannot {reason} it", self._terminate, j, reason,
                             self.stop_timeout_s)
            elif reason == "cancel" or j.reason == "resize":
                j.reason = reason

    def status(self, job_id: str) -> ExecStatus:
        with self.lock:
            j = self._jobs.get(job_id)
            if j is None:
                return ExecStatus(job_id, ExecState.UNKNOWN)
            live = self.backend.workers(j) or ()
            return ExecStatus(job_id, j.state, j.plan if live else None, j.launches, j.crashes,
                              j.exit_codes, j.message, live, j.started_at, tuple(j.events))

    def cluster(self) -> Cluster:
        return self.backend.cluster()

    def reclaim(self, job_id: str, workers: Sequence[str]) -> None:
        self.backend.reclaim(job_id, workers)

    def has_workers(self, j: J) -> bool:
        """The job has a worker set (being started, running or stopping), or an early start
        or an in-place resize's new workers."""
        return j.early is not None or j.resize is not None or self.backend.workers(j) is not None

    def jobs(self) -> list[J]:
        """Every job record (its parts walk them under the lock)."""
        return list(self._jobs.values())

    def job(self, job_id: str) -> J | None:
        return self._jobs.get(job_id)

    @property
    def files(self) -> JobFiles:
        """Every job's files under root/jobs/ (its parts write there too)."""
        return self._files

    def shutdown(self, timeout_s: float = 30.0) -> None:
        with self.lock:
            for j in self._jobs.values():
                if self.has_workers(j) and j.state is not ExecState.STOPPING:
                    self.guarded(j, "cannot stop it", self._terminate, j, "shutdown", timeout_s)
                j.target = None
        deadline = time.monotonic() + timeout_s + 5
        while time.monotonic() < deadline:
            with self.lock:
                if not any(self.has_workers(j) for j in self._jobs.values()):
                    break
            time.sleep(self.poll_s)
        self._closing.set()
        self._thread.join(timeout=self.join_timeout_s)
        with self.lock:
            for j in self._jobs.values():
                if self.has_workers(j):
                    self.guarded(j, "cannot release its workers", self._release, j)

    # -- the background loop ------------------------------------------------------------------
    def _run(self) -> None:
        while not self._closing.is_set():
            try:
                self.backend.refresh()
            except Exception:  # noqa: BLE001 - a refresh failing is retried next round
                log.exception("executor refresh failed")
            with self.lock:
                try:
                    if self.early is not None:
                        self.early.plan_starts()
                except Exception:  # noqa: BLE001 - the jobs still advance; planned next pass
                    log.exception("executor planning failed")
                for j in list(self._jobs.values()):
                    self.guarded(j, "executor error", self._advance, j)
                self._start_queued()
            self.last_round = time.monotonic()
            self._closing.wait(self.poll_s)

    def guarded(self, j: J, what: str, step: Callable[..., Any], *args: Any,
                kind: str = "executor-error") -> None:
        """Run one step for job `j`; if it raises, the job fails with a `kind` event (its
        workers are released if they can be) and nothing else is affected."""
        try:
            step(*args)
        except Exception as exc:  # noqa: BLE001 - one job must not stop the others
            detail = " ".join(f"{what}: {type(exc).__name__}: {exc}".split())[:500]
            try:
                self.fail(j, detail, kind)
            except Exception as again:  # noqa: BLE001 - even its clean-up failed: mark it only
                j.state, j.message = ExecState.FAILED, detail
                j.events.append((kind, f"{detail}; clean-up failed too: {again}"[:600]))

    def event(self, j: J, kind: str, detail: str) -> None:
        """Something the service records for this job (and the job's log)."""
        j.events.append((kind, detail))
        self.files.note(j.launch.job_id, detail)

    def _watch(self, j: J, codes: Sequence[int | None], running: Any) -> None:
        """Act on a started worker set's exit statuses (None: still running); `running` is the
        target it was started for."""
        if j.state is ExecState.RUNNING:
            if all(c is not None for c in codes):
                self.exited(j)
            elif any(c not in (None, 0) for c in codes):
                bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
                self.files.note(j.launch.job_id, f"worker(s) failed (rank, status): {bad}"
                                + lost_note([c for _, c in bad]) + "; stopping the rest")
                self._terminate(j, "crash", self.crash_grace_s)
            elif j.target != running and not (self.early is not None
                                              and self.early.keeps_training(j)):
                if j.target is None:  # a stop deferred by `applying()`
                    self._terminate(j, "stop", self.stop_timeout_s)
                else:
                    self._resize(j)
        elif j.state is ExecState.STOPPING:
            if all(c is not None for c in codes):
                self.exited(j)
            elif time.monotonic() > j.deadline:
                if j.killed == 0:
                    alive = sum(c is None for c in codes)
                    self.event(j, "killed", f"killed at stop timeout: {alive} worker(s) still "
                               f"running after SIGTERM ({j.reason or 'stop'}); sent SIGKILL")
                self.backend.signal(j, signal.SIGKILL)  # again at later steps: harder
                j.deadline = time.monotonic() + KILL_WAIT_S
                j.killed += 1

    def exited(self, j: J) -> None:
        """The current worker set is gone (or was called off before it started): what next."""
        job_id = j.launch.job_id
        codes = self._release(j)
        reason, j.reason = (j.reason if j.state is ExecState.STOPPING else ""), ""
        if codes is not None:
            j.exit_codes = tuple(codes)
            self.files.note(job_id, f"launch {j.launches - 1} exited with {list(codes)}"
                            + (f" ({reason})" if reason else "") + lost_note(codes))
            if reason != "cancel" and (all(c == 0 for c in codes) or self._reported_finished(j)):
                j.state = ExecState.DONE
                return
        if reason == "cancel":
            j.state = ExecState.CANCELLED
            return
        if codes is not None and reason in ("", "crash"):
            j.crashes += 1
            if j.crashes > self.max_retries:
                j.state = ExecState.FAILED
                j.message = (f"workers failed {j.crashes} times (exit statuses "
                             f"{list(j.exit_codes)}); see its log")
                self.files.note(job_id, j.message)
                return
            wait_s = min(MAX_BACKOFF_S, self.retry_backoff_s * 2 ** (j.crashes - 1))
            j.not_before = time.monotonic() + wait_s
            self.event(j, "retry", f"restarting from the last checkpoint in {wait_s:g} s "
                       f"(retry {j.crashes} of {self.max_retries})")
        if j.target is not None:
            j.state, j.queued_at = ExecState.QUEUED, time.monotonic()
        else:
            j.state = ExecState.STOPPED

    def _reported_finished(self, j: J) -> bool:
        """The launch that just exited reported that training finished (a signal may have
        caught it while the interpreter was shutting down, turning status 0 into -15)."""
        report = self.files.report(j.launch.job_id)
        return (report is not None and report.state == "finished"
                and report.launch == self.launch_number(j) - 1)

    def _terminate(self, j: J, reason: str, timeout_s: float) -> None:
        j.state, j.reason, j.killed = ExecState.STOPPING, reason, 0
        j.deadline = time.monotonic() + timeout_s
        if self.has_workers(j):
            self.backend.signal(j, signal.SIGTERM)

    def _resize(self, j: J) -> None:
        """Move the running job to `j.target`: in place where the job allows it, else (or
        with no `inplace` part) checkpoint-restart."""
        if self.inplace is None or not self.inplace.begin(j):
            self._terminate(j, "resize", self.stop_timeout_s)

    def joining_ended(self, j: J, planned: Any, old_codes: Sequence[int | None],
                      joiner_codes: Sequence[int | None]) -> bool:
        """While an in-place resize's new workers start: drop it when the job was re-decided
        (its target is no longer `planned`), stopped or crashed, and the lifecycle goes on;
        fall back to checkpoint-restart when a new worker exited or time ran out. True when
        the resize is over."""
        if j.state is not ExecState.RUNNING or j.target != planned or any(
                c is not None for c in old_codes):
            self._drop_resize(j)
        elif any(c is not None for c in joiner_codes):
            self.fall_back(j, f"a new worker exited with status {list(joiner_codes)} before it "
                           "was ready")
        elif j.resize.timed_out():
            self.fall_back(j, "the new workers were not ready in time")
        else:
            return False
        return True

    def fall_back(self, j: J, why: str) -> None:
        """The in-place resize under way (`j.resize`, corral.executors.resize) failed: its new
        workers end, and the job is resized by checkpoint-restart instead (the old workers
        checkpoint the state they hold on SIGTERM, or have already)."""
        target = j.resize.new_world
        self._drop_resize(j)
        self.event(j, "resize-fallback", f"in-place resize to {target} worker(s) failed: {why}; "
                   "resizing by checkpoint-restart instead")
        if j.state is ExecState.RUNNING:  # a stop or cancel under way keeps its reason
            self._terminate(j, "resize", self.stop_timeout_s)

    def _drop_resize(self, j: J) -> None:
        """End the in-place resize under way: its new workers and their slots."""
        assert self.inplace is not None  # (only it starts one)
        self.inplace.drop(j)

    def advance_in_flight(self, j: J) -> bool:
        """Move on an early start or an in-place resize under way (the first step of
        `_advance`); True while one still holds the job, whose worker set is then not watched
        this pass."""
        if j.early is not None:
            assert self.early is not None  # (only its sequence starts one)
            self.early.advance(j)
            return True
        if j.resize is not None:
            assert self.inplace is not None  # (only it starts one)
            self.inplace.advance(j)
            return j.resize is not None
        return False

    def fail(self, j: J, message: str, kind: str = "start-failed") -> None:
        """The job ends FAILED with `message` (its workers released first)."""
        j.state, j.message, j.target = ExecState.FAILED, message, None
        self.event(j, kind, message)
        if self.has_workers(j):
            self._release(j)

    def requeue(self, j: J) -> None:
        """Its worker set could not start after all (its node left while it started): release
        it and queue the job again."""
        self._release(j)
        j.state, j.queued_at = ExecState.QUEUED, time.monotonic()

    def _release(self, j: J) -> list[int] | None:
        """End the job's worker set, its in-place resize's and its early start's new workers
        and free their slots; the exit statuses of the set that had started (None: none)."""
        if j.resize is not None:
            self._drop_resize(j)
        if j.early is not None:
            assert self.early is not None  # (only its sequence starts one)
            self.early.slots.drop(j)
        return self.backend.release(j)

    def _advance(self, j: J) -> None:
        """Move the job's worker set on, and act on what it shows once started."""
        if self.advance_in_flight(j):
            return
        polled = self.backend.poll(j)
        if polled is not None:
            self._watch(j, polled.codes, polled.target)

    def _start_queued(self) -> None:
        now = time.monotonic()
        queued = sorted((j for j in self._jobs.values()
                         if j.state is ExecState.QUEUED and not self.has_workers(j)),
                        key=lambda j: j.queued_at)
        for j in queued:
            if j.target is None:
                j.state = ExecState.STOPPED
            elif now >= j.not_before:
                self.guarded(j, "cannot start it", self.backend.start, j, kind="start-failed")

    # -- launching ----------------------------------------------------------------------------
    @staticmethod
    def launch_number(j: JobRecord) -> int:
        """The number workers of the job's next launch are told (see JobLaunch)."""
        return j.launch.config.launch + j.launches

    def worker_env(self, j: J, batch: BatchConfig | None, num_nodes: int, *, gpu: bool,
                   inherit: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment every worker of the job's next launch gets, before its rank's
        variables: `inherit`, the job's env, CORRAL_* (and no GPU, one BLAS thread on CPU)."""
        job = j.launch
        ckpt = self.files.checkpoint_dir(job.job_id)
        ckpt.mkdir(parents=True, exist_ok=True)
        config = job.config.replace(
            job_id=job.job_id, num_nodes=num_nodes, launch=self.launch_number(j),
            batch=(batch.local_bsz, batch.accum_steps) if batch else None,
            checkpoint_dir=str(ckpt), report_path=str(self.files.report_path(job.job_id)),
            report_interval_s=self.report_interval_s,
            checkpoint_interval_s=self.checkpoint_interval_s)
        inherited = {k: v for k, v in (inherit or {}).items() if k not in SERVICE_ENV}
        env = {**inherited, **job.env, ENV_JOB_ID: job.job_id, ENV_CHECKPOINT_DIR: str(ckpt),
               ENV_CONFIG: config.to_json(), ENV_CONTROL_DIR: str(self.files.control_dir(job.job_id)),
               "PYTHONUNBUFFERED": "1"}
        if not gpu:
            env["CUDA_VISIBLE_DEVICES"] = ""
            for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                env.setdefault(var, "1")
        return env


def lost_note(codes: Sequence[int]) -> str:
    """What a note about these exit statuses adds when a worker was lost (`LOST`)."""
    return " - worker(s) lost: their node left or their actor died" if LOST in codes else ""
