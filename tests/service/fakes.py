"""A fake executor for the service tests: records calls; tests move jobs between states by
hand. A module of its own (not conftest) so test modules can import it unambiguously."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from corral.core.cluster import Cluster, Node
from corral.executors.base import ExecState, ExecStatus, Executor, JobLaunch, WorkerPlan
from corral.protocol.report import Report, ReportError


class FakeFiles:
    """The fake executor's job files: the reports tests wrote, a log line per job."""

    def __init__(self, reports: dict[str, dict[str, Any]]) -> None:
        self.reports = reports

    def report(self, job_id: str) -> Report | None:
        """The report a test wrote for the job (a JSON document, as a job writes its file),
        read as an executor reads it: typed, or None when refused."""
        doc = self.reports.get(job_id)
        try:
            return None if doc is None else Report.parse(doc)
        except ReportError:
            return None

    def read_log(self, job_id: str, rank: int = 0, tail_bytes: int | None = None) -> str:
        return f"log of {job_id} rank {rank}\n"

    def checkpoint_dir(self, job_id: str) -> Path:
        return Path("/nonexistent") / job_id


class FakeExecutor(Executor):
    """An in-memory executor: records calls; tests move jobs between states by hand."""

    name = "fake"

    def __init__(self, slots: int = 4) -> None:
        self.slots = slots
        self.states: dict[str, ExecState] = {}
        self.plans: dict[str, WorkerPlan] = {}
        self.launches: dict[str, JobLaunch] = {}
        self.reports: dict[str, dict[str, Any]] = {}
        self.workers: dict[str, tuple[str, ...]] = {}
        self.calls: list[tuple[str, str]] = []
        self.reclaimed: list[tuple[str, tuple[str, ...]]] = []
        self.crashes: dict[str, int] = {}
        self.events: dict[str, list[tuple[str, str]]] = {}
        self.rounds: list[list[tuple[str, str]]] = []  # the calls made inside each applying()
        self.forgotten: list[str] = []  # jobs the service let go of (`forget`), in order
        self._round: list[tuple[str, str]] | None = None

    def cluster(self) -> Cluster:
        return Cluster((Node("here", self.slots),))

    @contextlib.contextmanager
    def applying(self) -> Iterator[None]:
        self._round = []
        try:
            yield
        finally:
            self.rounds.append(self._round)
            self._round = None

    def _called(self, what: str, job_id: str) -> None:
        self.calls.append((what, job_id))
        if self._round is not None:
            self._round.append((what, job_id))

    def place(self, job: JobLaunch, plan: WorkerPlan) -> None:
        self._called("place", job.job_id)
        self.launches[job.job_id], self.plans[job.job_id] = job, plan
        self.states[job.job_id] = ExecState.RUNNING
        self.workers[job.job_id] = tuple(str(1000 + i) for i in range(plan.num_workers))

    def stop(self, job_id: str, *, cancel: bool = False) -> None:
        if cancel:
            self.calls.append(("cancel", job_id))
            self.states[job_id] = ExecState.CANCELLED
            return
        self._called("stop", job_id)
        self.states[job_id] = ExecState.STOPPED
        self.workers[job_id] = ()

    def status(self, job_id: str) -> ExecStatus:
        state = self.states.get(job_id, ExecState.UNKNOWN)
        return ExecStatus(job_id, state, self.plans.get(job_id), crashes=self.crashes.get(job_id, 0),
                          workers=self.workers.get(job_id, ()),
                          events=tuple(self.events.get(job_id, ())))

    @property
    def files(self) -> FakeFiles:
        return FakeFiles(self.reports)

    def reclaim(self, job_id: str, workers: Sequence[str]) -> None:
        self.reclaimed.append((job_id, tuple(workers)))

    def shutdown(self, timeout_s: float = 30.0) -> None:
        self.calls.append(("shutdown", ""))

    def forget(self, job_id: str) -> None:
        self.forgotten.append(job_id)
