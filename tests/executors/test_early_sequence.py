"""The early-start sequence (`EarlyStarts`) on its own, over fake slots: now a part of the job
table rather than a template's hooks, it runs without processes or Ray. The real backends'
early starts are tested in test_local_early.py and test_ray_executor.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from corral.core.cluster import Placement
from corral.executors.base import ExecState, JobLaunch, WorkerPlan
from corral.executors.early import EarlyStart, EarlyStarts
from corral.executors.jobfiles import JobFiles
from corral.executors.lifecycle import JobRecord
from corral.protocol.early import gate_path
from corral.protocol.inplace import mark_ready


class _Table:
    """The job table as the sequence sees it (corral.executors.lifecycle.JobTable)."""

    def __init__(self, root: Path) -> None:
        self.files = JobFiles(root)
        self._jobs: dict[str, JobRecord] = {}
        self.exited_jobs: list[str] = []

    def add(self, job_id: str, state: ExecState, plan: WorkerPlan | None) -> JobRecord:
        j = JobRecord(JobLaunch(job_id, ("true",), "/"), plan, state=state)
        self._jobs[job_id] = j
        return j

    def jobs(self) -> list[JobRecord]:
        return list(self._jobs.values())

    def job(self, job_id: str) -> JobRecord | None:
        return self._jobs.get(job_id)

    def has_workers(self, j: JobRecord) -> bool:
        return j.state is ExecState.RUNNING or j.early is not None

    @staticmethod
    def launch_number(j: JobRecord) -> int:
        return j.launches

    def guarded(self, j: JobRecord, what: str, step: Any, *args: Any) -> None:
        step(*args)

    def event(self, j: JobRecord, kind: str, detail: str) -> None:
        j.events.append((kind, detail))

    def exited(self, j: JobRecord) -> None:
        self.exited_jobs.append(j.launch.job_id)


class _Slots:
    """Slot 0 is free; the donor `d` gives up slot 1. `failing` makes its workers fail."""

    def __init__(self) -> None:
        self.failing: str | None = None
        self.released = False  # the donor's workers have left slot 1
        self.taken: list[str] = []
        self.dropped: list[str] = []

    def plan(self, j: JobRecord) -> tuple[list[Any], dict[str, list[Any]]] | None:
        return [0], {"d": [1]}

    def record(self, j: JobRecord, generation: int, free: list[Any],
               donors: dict[str, list[Any]]) -> EarlyStart:
        return EarlyStart(j.target, generation, free + donors["d"], donors)

    def start(self, j: JobRecord) -> str | None:
        return None

    def failure(self, j: JobRecord) -> str | None:
        return self.failing

    def donor_keeps(self, d: JobRecord, slots: Any) -> bool:
        return False

    def handed_over(self, j: JobRecord) -> bool:
        return self.released

    def take(self, j: JobRecord, e: EarlyStart) -> None:
        self.taken.append(j.launch.job_id)

    def drop(self, j: JobRecord) -> None:
        self.dropped.append(j.launch.job_id)
        j.early = None


def _setup(tmp_path: Path, timeout_s: float = 60.0):
    table, slots = _Table(tmp_path), _Slots()
    early = EarlyStarts(table, slots, timeout_s=timeout_s)  # type: ignore[arg-type]
    two = WorkerPlan(Placement(((0, 2),)))
    table.add("d", ExecState.RUNNING, WorkerPlan(Placement(((0, 1),))))
    j = table.add("j", ExecState.QUEUED, two)
    j.launch = JobLaunch("j", ("true",), "/", early_init=True)
    return table, slots, early, j


def test_a_job_starts_early_trains_once_ready_and_handed_over(tmp_path: Path) -> None:
    table, slots, early, j = _setup(tmp_path)
    early.plan_starts()
    assert j.early is not None and j.early.slots == [0, 1]
    assert early.keeps_training(table.job("d"))  # the donor trains on while j initialises
    assert early.promised_slots() == [1]
    early.advance(j)
    assert j.early is not None and j.early.initialising  # no worker is ready yet
    control = table.files.control_dir("j")
    for rank in (0, 1):
        mark_ready(control, 0, rank)
    early.advance(j)  # every worker ready: the donor lets go
    assert not early.keeps_training(table.job("d")) and early.let_go() == {"d"}
    assert [k for k, _ in table.job("d").events] == ["donated"]
    early.advance(j)
    assert j.state is ExecState.QUEUED  # the donor still holds slot 1
    slots.released = True
    early.advance(j)
    assert j.state is ExecState.RUNNING and j.launches == 1 and j.early is None
    assert slots.taken == ["j"] and gate_path(control, 0).exists()
    assert [k for k, _ in j.events] == ["early-init", "early-started"]


def test_a_failing_worker_calls_the_early_start_off_for_good(tmp_path: Path) -> None:
    table, slots, early, j = _setup(tmp_path)
    early.plan_starts()
    slots.failing = "a worker exited (statuses [1, None]) before it was ready"
    early.advance(j)
    assert j.early is None and slots.dropped == ["j"] and j.no_early_for == 0
    assert j.events[-1][0] == "early-init-fallback" and "a worker exited" in j.events[-1][1]
    early.plan_starts()  # not retried for that launch: it starts normally
    assert j.early is None


def test_workers_not_ready_in_time_and_a_changed_placement_call_it_off(tmp_path: Path) -> None:
    table, slots, early, j = _setup(tmp_path, timeout_s=0.05)
    early.plan_starts()
    time.sleep(0.1)
    early.advance(j)
    assert j.early is None and "not ready within 0.05 s" in j.events[-1][1]

    table, slots, early, j = _setup(tmp_path / "again")
    early.plan_starts()
    j.target = WorkerPlan(Placement(((0, 1),)))
    early.advance(j)
    assert j.early is None and "its placement changed" in j.events[-1][1]


def test_a_job_that_may_not_start_early_waits(tmp_path: Path) -> None:
    table, slots, early, j = _setup(tmp_path)
    j.launch = JobLaunch("j", ("true",), "/", early_init=False)
    early.plan_starts()
    assert j.early is None and not j.events
