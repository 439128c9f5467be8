"""The executor contract: how the service runs, resizes and stops a job's workers.

Declarative and asynchronous: the service says where each job runs (`place`), to stop resumably
(`stop`, a preemption) or go (`stop(cancel=True)`); the executor acts in the background and
answers `status`; what a job wrote (its report, logs, checkpoints) the service reads through
`files`, a `JobFilesReader`. Resizes default to checkpoint-restart (Pollux (OSDI'21) §4.2,
SideCar (SC'20) §III-B-4): SIGTERM every worker, wait for checkpoint and exit, start the new
set. A crash restarts from the checkpoint with exponential back-off, at most `max_retries`
times; an executor failure fails that job only. Done: every worker exits 0, or the job's report
says so. Every executor passes tests/executors/contract.py; worker environment:
corral.protocol.env.

`Executor` is what the control loop calls: seven methods a new executor writes (`cluster`,
`place`, `stop`, `status`, `files`, `reclaim`, `shutdown`), two it may (`forget`, `applying`),
and `last_round`, which one with background work keeps. A backend that runs commands does not
implement it: it implements `corral.executors.backend.Backend`, and the job table
(corral.executors.lifecycle.JobTable) is the executor over it.
"""

from __future__ import annotations

import contextlib
import enum
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import BatchConfig, JobSpec
from corral.protocol.env import JobConfig
from corral.protocol.report import Report

__all__ = ["ExecState", "JobLaunch", "WorkerPlan", "ExecStatus", "Executor", "JobFilesReader",
           "TERMINAL"]


class ExecState(str, enum.Enum):
    UNKNOWN = "unknown"  # never placed on this executor
    QUEUED = "queued"  # should run; waiting for its slots to be free
    RUNNING = "running"  # workers alive
    STOPPING = "stopping"  # asked to checkpoint and exit (resize, preemption, crash clean-up)
    STOPPED = "stopped"  # no workers, resumable from its checkpoint
    DONE = "done"  # every worker exited 0
    FAILED = "failed"  # crashed more than max_retries times, or could not start
    CANCELLED = "cancelled"


TERMINAL = frozenset({ExecState.DONE, ExecState.FAILED, ExecState.CANCELLED})


@dataclass(frozen=True)
class JobLaunch:
    """What never changes between a job's launches: its command and submitted limits.

    `config.launch` is the number of launches before this executor saw the job (a restarted
    service passes how many its predecessors made); workers are told that plus the launches
    this executor made, so launch numbers never repeat.
    """

    job_id: str
    command: tuple[str, ...]
    cwd: str
    env: Mapping[str, str] = field(default_factory=dict)
    config: JobConfig = field(default_factory=JobConfig)
    #: the job as policies see it (its model is `spec.app`); executors that run commands
    #: ignore it, the emulated executor builds its simulated job from it
    spec: JobSpec | None = None
    #: may its workers start early, on slots a donor still trains on (corral.protocol.early)?
    #: True: it waits at the start gate; False: never (two processes on one GPU do not fit);
    #: None: only once a report shows it runs corral.train, which always waits at the gate
    early_init: bool | None = None
    #: the Unix user its workers run as (its queue's `run_as`; the local executor, the
    #: service running as root), None: the service's own
    run_as: str | None = None


@dataclass(frozen=True)
class WorkerPlan:
    """Where a job runs now: its placement, and the batch when the policy fixed it."""

    placement: Placement
    batch: BatchConfig | None = None

    @property
    def num_workers(self) -> int:
        return self.placement.num_gpus


@dataclass(frozen=True)
class ExecStatus:
    """One job as the executor sees it."""

    job_id: str
    state: ExecState
    plan: WorkerPlan | None = None  # what its live workers run with (None when none)
    launches: int = 0  # worker sets started so far
    crashes: int = 0  # unexpected worker failures so far
    exit_codes: tuple[int, ...] = ()  # of the last worker set that exited
    message: str = ""
    workers: tuple[str, ...] = ()  # opaque ids of live workers (pids for the local executor)
    started_at: float | None = None  # wall-clock start of the current worker set
    #: what happened to the job that the service should record, oldest first, as
    #: (kind, detail): "start-failed", "executor-error", "killed" (at the stop timeout),
    #: "retry" (a crash restart and its back-off); every event since the job was first placed
    events: tuple[tuple[str, str], ...] = ()

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


class JobFilesReader(Protocol):
    """What the service reads of a job's files (`Executor.files`): its report, a worker's log,
    where it checkpoints. The local and Ray executors' is `JobFiles` (jobfiles.py); the
    emulated executor's keeps the latest report in memory."""

    def report(self, job_id: str) -> Report | None:
        """The job's latest report (corral.protocol.report), None when it has sent none or
        the last it sent was refused."""

    def read_log(self, job_id: str, rank: int = 0, tail_bytes: int | None = None) -> str:
        """A worker's output so far (rank 0 by default), across all its launches."""

    def checkpoint_dir(self, job_id: str) -> Path:
        """Where the job's workers checkpoint (CORRAL_CHECKPOINT_DIR)."""


class Executor(ABC):
    """Runs jobs' workers, as the control loop sees it; every method returns at once (work
    happens in the background)."""

    name: ClassVar[str]
    #: `time.monotonic()` when the executor's background work last finished a pass over its
    #: jobs (for /healthz: an old one means it is stuck); None when it has no background work
    last_round: float | None = None

    @abstractmethod
    def cluster(self) -> Cluster:
        """The GPU (or CPU) slots this executor can hand out, as nodes."""

    @abstractmethod
    def place(self, job: JobLaunch, plan: WorkerPlan) -> None:
        """Run `job` on `plan`: start it, or resize it (checkpoint-restart) if it runs on
        another plan. Ignored for a job that is done, failed or cancelled."""

    @abstractmethod
    def stop(self, job_id: str, *, cancel: bool = False) -> None:
        """Preempt: checkpoint and stop the workers; the job stays resumable (STOPPED). With
        `cancel`: stop them for good (CANCELLED), whatever it was stopping for."""

    @abstractmethod
    def status(self, job_id: str) -> ExecStatus:
        """The job's state now (UNKNOWN for a job never placed here)."""

    @property
    @abstractmethod
    def files(self) -> JobFilesReader:
        """What jobs wrote: reports, logs, checkpoints (readable after `forget` too)."""

    @abstractmethod
    def reclaim(self, job_id: str, workers: Sequence[str]) -> None:
        """Stop workers a previous executor instance left running for `job_id` (asking them to
        checkpoint first); blocks until they are gone, bounded by the stop timeout."""

    @abstractmethod
    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Stop every job's workers (checkpointing) and the background work."""

    def refusal(self, cwd: str) -> str | None:
        """Why a job working in `cwd` could never start here (one line), or None. Asked at
        submission, so that a job its start would refuse is refused before it waits. Here:
        none."""
        return None

    def forget(self, job_id: str) -> None:
        """The service recorded the job's end (done, failed or cancelled): let go of what is
        kept of it, so that an executor's memory and its passes over jobs do not grow with the
        jobs it has run. `status` answers UNKNOWN for it after; its logs stay readable. Here:
        nothing is let go."""

    def applying(self) -> contextlib.AbstractContextManager[None]:
        """A context in which the service applies one round's decisions (its `place` and
        `stop` calls): an executor that hands slots from a job giving them up to the job that
        takes them (early initialisation) sees the round whole before it acts. Here: nothing."""
        return contextlib.nullcontext()

    # -- shared helpers ----------------------------------------------------------------------
    def wait_for(self, job_id: str, states: Sequence[ExecState] | ExecState,
                 timeout_s: float, poll_s: float = 0.05) -> ExecStatus:
        """Poll until the job is in one of `states`; raises TimeoutError after `timeout_s`."""
        wanted = {states} if isinstance(states, ExecState) else set(states)
        deadline = time.monotonic() + timeout_s
        while True:
            st = self.status(job_id)
            if st.state in wanted:
                return st
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {st.state.value} after {timeout_s:.0f} s "
                                   f"(waiting for {', '.join(sorted(s.value for s in wanted))})")
            time.sleep(poll_s)
