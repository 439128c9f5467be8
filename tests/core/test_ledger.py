"""One ledger: a simulated job (corral.sim.loop.job.SimJob) and a live job (corral.service.jobs.
LiveJob) given the same assignments, pauses and time show the same `JobView`, field for field.

The live job learns its training progress from its report; here the report is the simulated
job's own progress, so every field a policy sees must agree, the books (time, restarts, first
start, last change, epochs since the change) included."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from corral.core.cluster import Placement
from corral.core.jobs import Assignment, BatchConfig, JobStatus, JobView
from corral.core.ledger import JobLedger
from corral.protocol.report import Report
from corral.service.jobs import LiveJob, LiveStatus
from corral.service.submission import Submission
from corral.sim.loop.job import SimJob
from corral.sim.truth.source import TruthSource
from corral.sim.workloads import builtin_default


def _pair() -> tuple[SimJob, LiveJob]:
    truth = TruthSource.of(None, None).load()
    spec = next(s for s in builtin_default(truth.limits()).jobs if s.adaptive)
    spec = dataclasses.replace(spec, name="job-1", submit_time_s=0.0)
    sim = SimJob(spec, truth.app(spec.app))
    sim.clock_s = 0.0
    sub = Submission(command=["python", "train.py"]).checked(4)
    return sim, LiveJob("job-1", sub, spec)


_REPORTS = itertools.count(1)


def _report_of(sim: SimJob) -> dict:
    """What a live job running as `sim` ran would report now (a new report each time)."""
    b = sim.batch
    return {"time": float(next(_REPORTS)), "steps": int(sim.steps), "epoch": sim.epoch, "progress": sim.progress,
            "batch": [b.local_bsz, b.accum_steps] if b else None,
            "world_size": sim.placement.num_gpus, "metrics": [list(m) for m in sim.metrics],
            "estimator": sim.estimator.to_dict()}


def _fields(view: JobView) -> dict:
    out = {f.name: getattr(view, f.name) for f in dataclasses.fields(JobView)}
    out["estimator"] = view.estimator.to_dict()
    return out


def _advance(sim: SimJob, live: LiveJob, to_s: float) -> None:
    dt = to_s - sim.clock_s
    sim.advance(to_s)
    live.holding = bool(live.placement)  # its workers hold their slots as soon as placed
    live.account(dt)
    live.report = Report.parse(_report_of(sim))


def _assign(sim: SimJob, live: LiveJob, now: float, assignment: Assignment | None) -> None:
    changed_sim = sim.assign(now, assignment, pause_s=0.0)
    placement = assignment.placement if assignment else Placement()
    changed_live = live.assign(now, placement, assignment.batch if assignment else None)
    assert changed_sim == changed_live
    live.report = Report.parse(_report_of(sim))


STEPS = [  # (time, assignment at that time or "keep")
    (60.0, Assignment(Placement.of([(0, 2)]))),  # first start
    (600.0, Assignment(Placement.of([(0, 4)]))),  # resize: a restart
    (900.0, Assignment(Placement.of([(0, 4)]), BatchConfig(16, 1))),  # the policy fixes a batch
    (1200.0, None),  # preempted
    (1500.0, Assignment(Placement.of([(1, 1)]))),  # resumed after preemption: a restart
    (2400.0, Assignment(Placement.of([(1, 1)]))),  # the same: nothing changes
]


def test_same_assignments_same_view_in_both_worlds() -> None:
    sim, live = _pair()
    assert _fields(sim.view()) == _fields(live.view())
    for now, assignment in STEPS:
        _advance(sim, live, now)
        assert _fields(sim.view()) == _fields(live.view()), f"before the change at {now}"
        _assign(sim, live, now, assignment)
        assert _fields(sim.view()) == _fields(live.view()), f"after the change at {now}"
    _advance(sim, live, 2800.0)  # the job finishes at about 3,000 s
    view, other = sim.view(), live.view()
    assert _fields(view) == _fields(other)
    assert view.restarts == 2 and view.status is JobStatus.RUNNING and view.epoch > 0
    assert view.epochs_since_change == view.epoch - sim.epoch_at_change > 0
    assert (sim.preemptions, live.preemptions) == (1, 1)
    assert view.queue_time_s == pytest.approx(60.0 + 300.0)
    assert view.attained_gpu_s == pytest.approx(2 * 540 + 4 * 600 + 1 * 1300)


def test_the_end_shows_alike_and_a_live_job_keeps_its_books_across_a_store() -> None:
    sim, live = _pair()
    _advance(sim, live, 30.0)
    _assign(sim, live, 30.0, Assignment(Placement.of([(0, 1)])))
    _advance(sim, live, 100.0)
    sim.end(100.0, JobStatus.DONE)
    sim.release()
    live.finish(100.0, LiveStatus.DONE)
    assert _fields(sim.view()) == _fields(live.view())
    assert live.view().status is JobStatus.DONE and not live.view().assignment
    again = LiveJob.from_doc(live.to_doc())  # (its spec is rebuilt from its submission)
    assert {**_fields(again.view()), "spec": None} == {**_fields(live.view()), "spec": None}
    books = [n for n in JobLedger.__slots__ if n != "spec"]
    assert {n: getattr(again, n) for n in books} == {n: getattr(live, n) for n in books}


def test_a_crash_retry_is_a_restart_and_a_requeue_is_not_a_preemption() -> None:
    _, live = _pair()
    live.assign(0.0, Placement.of([(0, 1)]), None)
    live.crash_retried(2)
    live.requeue()
    assert (live.restarts, live.crash_retries, live.preemptions) == (2, 2, 0)
    assert live.view().status is JobStatus.PENDING
    live.assign(5.0, Placement.of([(0, 1)]), None)  # resumes: a restart, as in the simulator
    assert live.restarts == 3 and live.first_start_s == 0.0
