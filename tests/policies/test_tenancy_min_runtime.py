"""`min_runtime_s` counts from a job's last real (re)start (`JobView.last_start_s`: a worker
set launched), not from its last placement change: an in-place shrink or grow keeps the job's
workers and does not renew its protection (issue 43). The layer reads it; the simulator's
books set it by the mechanism (`Mechanism.relaunches`), the live loop by the launch's report
(tests/service/test_loop.py)."""

from __future__ import annotations

import dataclasses

from layer_rounds import AsAsked, spec, view

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import Decision, Snapshot
from corral.core.ledger import JobLedger
from corral.core.queues import parse_queues
from corral.policies.tenancy import QueuedPolicy
from corral.service.jobs import LiveJob
from corral.service.submission import Submission
from corral.sim.loop.mechanism import CheckpointRestart, mechanism_named

ONE = Cluster.parse("1x4")
TEAMS = "min_runtime_s = 10\n[queue.a]\nquota = 2\n[queue.b]\nquota = 2\n"


def test_an_in_place_shrink_does_not_renew_the_protection() -> None:
    # a borrows 3 of 4 GPUs with three 1-GPU jobs; b's 2-GPU job arrives and a must give one
    # back whole. a1 started at 0 and was shrunk in place (2 -> 1) at 55: at 60 it has run
    # 60 s on its workers and may be taken out; a2 and a3 started at 52 are protected
    a1 = view(dataclasses.replace(spec("a1", 1, "a"), min_gpus=1), Placement.of({0: 1}), 55.0)
    a1 = dataclasses.replace(a1, first_start_s=0.0, last_start_s=0.0)
    jobs = (a1, *(view(dataclasses.replace(spec(n, 1, "a"), min_gpus=1), Placement.of({0: 1}),
                       52.0) for n in ("a2", "a3")),
            view(dataclasses.replace(spec("b1", 2, "b", 59.0), min_gpus=1)))
    layer = QueuedPolicy(AsAsked, parse_queues(TEAMS, total_gpus=4))
    decision = layer.decide(Snapshot(60.0, ONE, jobs, Decision()))
    assert "a1" not in decision.assignments
    assert decision.assignments["b1"].num_gpus == 2
    # a1 restarted (a new worker set) at 55: protected, as a2 and a3; b gets the idle GPU only
    restarted = dataclasses.replace(a1, last_start_s=55.0)
    layer = QueuedPolicy(AsAsked, parse_queues(TEAMS, total_gpus=4))
    decision = layer.decide(Snapshot(60.0, ONE, (restarted, *jobs[1:]), Decision()))
    assert {"a1", "a2", "a3"} <= set(decision.assignments)
    assert decision.assignments["b1"].num_gpus == 1


def test_the_simulators_books_keep_the_start_through_a_resize_in_place() -> None:
    two, one, elsewhere = Placement.of({0: 2}), Placement.of({0: 1}), Placement.of({1: 2})
    assert not mechanism_named("in-place").relaunches("cifar10", two, one)
    assert CheckpointRestart().relaunches("cifar10", two, one)
    sidecar = mechanism_named("sidecar")
    assert not sidecar.relaunches("cifar10", one, two)  # on its own host: reshaped in place
    assert sidecar.relaunches("cifar10", one, elsewhere)  # a new host: SideCar restarts it
    books = JobLedger(spec("j", 2, None))
    books.place(0.0, two, 0)
    books.place(55.0, one, 0, relaunch=False)
    assert (books.last_start_s, books.last_change_s) == (0.0, 55.0)
    books.place(70.0, two, 0)
    assert books.last_start_s == 70.0
    books.place(80.0, Placement(), 0)  # preempted, then resumed: a start
    books.place(90.0, one, 0, relaunch=False)
    assert books.last_start_s == 90.0


def test_a_live_resize_counts_as_a_restart_until_its_report_says_in_place() -> None:
    sub = Submission(command=["python", "train.py"], batch_size=128, app="cifar10").checked(8)
    job = LiveJob("job-1", sub, sub.spec("job-1", 0.0))
    job.assign(0.0, Placement.of({0: 2}), None)
    job.assign(55.0, Placement.of({0: 1}), None)
    assert job.view().last_start_s == 55.0  # not known yet: protected as a restart
    job.launched(in_place=True)
    assert job.view().last_start_s == 0.0 and job.view().last_change_s == 55.0
    job.assign(70.0, Placement.of({0: 2}), None)
    job.launched(in_place=False)  # a checkpoint-restart: a new worker set
    assert job.view().last_start_s == 70.0
