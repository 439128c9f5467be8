"""Pollux's re-allocation penalty counts a job's relaunches (`JobView.relaunches`), not its
in-place resizes: δ is a checkpoint-restart's delay, and a resize that keeps the workers does not
pay it (issue 43: nlp-1, shrunk in place once at 29.8 s old, had factor 0 and declined its move).
The books count it as they set `last_start_s`: the simulator's by the mechanism, the live loop's
by the new worker set's first report; an older stored document restores it from `restarts`."""

from __future__ import annotations

import pytest

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import JobSpec
from corral.core.ledger import JobLedger
from corral.policies.pollux.policy import Pollux, realloc_factor
from corral.service.jobs import LiveJob
from corral.service.submission import Submission

TWO, ONE = Placement.of({0: 2}), Placement.of({0: 1})


def _spec() -> JobSpec:
    return JobSpec(name="j", submit_time_s=0.0, app="cifar10", gpus=2, batch_size=128,
                   init_bsz=128, max_bsz=4096, min_local_bsz=32, max_local_bsz=1024,
                   adaptive=True)


def test_a_job_resized_in_place_keeps_its_age_factor() -> None:
    books = JobLedger(_spec())
    books.place(0.0, TWO, 0)
    books.place(20.0, ONE, 0, relaunch=False)  # shrunk in place: a restart, no relaunch
    view = books.view(0, 0, 0.0, None, None, None, ())
    assert (view.restarts, view.relaunches) == (1, 0)
    problem = Pollux().problem(29.8, Cluster.parse("1x2"), [view])
    assert problem.penalty[0] == pytest.approx(realloc_factor(29.8, 0, 30.0))  # 0.498, not 0
    books.place(40.0, TWO, 0)  # by checkpoint-restart: it paid δ
    books.crash_retried()
    assert (books.restarts, books.relaunches) == (3, 2)
    books.place(50.0, Placement(), 0)
    books.place(60.0, ONE, 0, relaunch=False)  # resumed: always a new worker set
    assert (books.restarts, books.relaunches) == (4, 3)


def test_a_live_resize_is_a_relaunch_until_its_report_says_in_place() -> None:
    sub = Submission(command=["python", "train.py"], batch_size=128, app="cifar10").checked(8)
    job = LiveJob("job-1", sub, sub.spec("job-1", 0.0))
    job.assign(0.0, TWO, None)
    job.assign(20.0, ONE, None)
    assert job.view().relaunches == 1  # not known yet: counted as a restart
    job.launched(in_place=True)
    assert (job.view().restarts, job.view().relaunches) == (1, 0)
    job.assign(40.0, TWO, None)
    job.launched(in_place=False)
    assert (job.view().restarts, job.view().relaunches) == (2, 1)
    again = LiveJob.from_doc(job.to_doc())
    assert again.relaunches == 1
    older = job.to_doc()  # a document stored before the count: every restart a relaunch
    del older["relaunches"]
    assert LiveJob.from_doc(older).relaunches == 2


def test_sias_restart_factor_counts_relaunches_too() -> None:
    """sia's factor is Pollux's (its artifact's): a job resized in place once keeps its age's
    factor; one relaunched once pays δ."""
    from corral.policies.sia.policy import SiaParams, restart_factor

    factors = []
    for relaunch in (False, True):
        books = JobLedger(_spec())
        books.place(0.0, TWO, 0)
        books.place(20.0, ONE, 0, relaunch=relaunch)
        factors.append(restart_factor(books.view(0, 0, 0.0, None, None, None, ()), 40.0,
                                      SiaParams()))
    assert factors == [pytest.approx(40 / 70), pytest.approx(10 / 70)]
