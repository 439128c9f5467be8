"""The control loop when things go wrong, and what it records: a failure of the executor for one
job fails only that job (with an event), liveness for /healthz, restarts counted as the
simulator counts them, where each launch started from, GPU time only while workers hold their
slots, and arrivals on idle GPUs started between rounds."""

from __future__ import annotations

import time
import warnings

import pytest
from fakes import FakeExecutor  # noqa: E402  (tests/service is on sys.path)
from loopkit import Clock, make_loop, submit  # noqa: E402

from corral.core.cluster import Placement
from corral.core.jobs import Assignment, Decision, Snapshot
from corral.core.policy import Policy
from corral.executors.base import ExecState
from corral.policies import policy_class, policy_names
from corral.service.loop import ControlLoop


class Scripted(Policy):
    """Places exactly what the test says (`plan`: job id -> GPUs on node 0)."""

    name = "scripted"

    def __init__(self) -> None:
        super().__init__(None)
        self.plan: dict[str, int] = {}

    def decide(self, snapshot: Snapshot) -> Decision:
        out, used = {}, 0
        for job_id, gpus in self.plan.items():
            if any(v.name == job_id for v in snapshot.jobs):
                out[job_id] = Assignment(Placement(((0, gpus),)))
                used += gpus
        return Decision(out)


class Faulty(FakeExecutor):
    """Raises for the jobs named in `broken[operation]`."""

    def __init__(self) -> None:
        super().__init__()
        self.broken: dict[str, set[str]] = {"place": set(), "stop": set(), "status": set(),
                                            "reclaim": set()}

    def _check(self, op: str, job_id: str) -> None:
        if job_id in self.broken[op]:
            raise OSError(f"injected {op} failure")

    def place(self, job, plan) -> None:
        self._check("place", job.job_id)
        super().place(job, plan)

    def stop(self, job_id: str, *, cancel: bool = False) -> None:
        if not cancel:  # a cancel never fails here
            self._check("stop", job_id)
        super().stop(job_id, cancel=cancel)

    def status(self, job_id: str):
        self._check("status", job_id)
        return super().status(job_id)

    def reclaim(self, job_id: str, workers) -> None:
        self._check("reclaim", job_id)
        super().reclaim(job_id, workers)


def scripted_loop(store, executor, clock=None) -> tuple[ControlLoop, Scripted]:
    policy = Scripted()
    return ControlLoop(store, executor, policy, interval_s=10, clock=clock or Clock()), policy


def kinds(store, job_id: str) -> list[str]:
    return [e["kind"] for e in store.events(job_id)]


@pytest.mark.parametrize("op", ["place", "status"])
def test_an_executor_failure_fails_only_that_job(store, op) -> None:
    ex = Faulty()
    a, b = submit(store, 100), submit(store, 100)
    ex.broken[op].add(a)
    loop = make_loop(store, ex)
    loop.tick()
    loop.tick()
    assert store.job(a)["status"] == "failed" and "injected" in store.job(a)["message"]
    assert "error" in kinds(store, a) and loop.failures_total == 1
    assert store.job(b)["status"] == "running" and ex.states[b] is ExecState.RUNNING
    c = submit(store, 101)  # the loop goes on scheduling
    loop.clock.t = 111
    loop.tick()
    assert store.job(c)["status"] == "running"


def test_a_failure_to_preempt_fails_that_job(store) -> None:
    ex = Faulty()
    loop, policy = scripted_loop(store, ex)
    a, b = submit(store, 100), submit(store, 100)
    policy.plan = {a: 2, b: 2}
    loop.tick()
    ex.broken["stop"].add(a)
    policy.plan = {b: 2}
    loop.clock.t = 111
    loop.tick()
    assert store.job(a)["status"] == "failed" and kinds(store, a)[-1] == "error"
    assert store.job(b)["status"] == "running"


def test_a_failure_to_reclaim_fails_that_job_and_recovers_the_rest(store) -> None:
    ex = FakeExecutor()
    a, b = submit(store, 100), submit(store, 100)
    loop = make_loop(store, ex)
    loop.tick()
    loop.tick()
    again = Faulty()
    again.broken["reclaim"].add(a)
    loop2 = make_loop(store, again)
    loop2.recover()
    assert store.job(a)["status"] == "failed" and "cannot reclaim" in store.job(a)["message"]
    assert set(loop2.jobs) == {b}


def test_healthz_answers_503_when_the_loop_or_the_executor_stalls(store) -> None:
    with warnings.catch_warnings():  # starlette's test client warns about its httpx dependency
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from corral.service.api import create_app

    ex = FakeExecutor()  # no background work: its last round is None
    loop = make_loop(store, ex)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(create_app(store, ex, loop, "t", stall_after_s=5))
    loop.tick()
    ok = client.get("/healthz")
    assert ok.status_code == 200 and ok.json()["loop"]["stalled"] is False
    loop.last_round = time.monotonic() - 60  # no round for a minute
    stalled = client.get("/healthz")
    assert stalled.status_code == 503 and stalled.json()["status"] == "stalled"
    assert stalled.json()["detail"].startswith("loop: no round for 6")
    loop.tick()
    assert client.get("/healthz").status_code == 200
    ex.last_round = time.monotonic() - 60
    assert client.get("/healthz").json()["executor"]["stalled"] is True
    client.close()


def test_restarts_count_resumes_after_preemption_and_crash_retries(store) -> None:
    ex = FakeExecutor()
    loop, policy = scripted_loop(store, ex)
    a = submit(store, 100)
    policy.plan = {a: 1}
    loop.tick()
    policy.plan = {}
    loop.clock.t = 111
    loop.tick()  # preempted
    policy.plan = {a: 2}
    loop.clock.t = 121
    loop.tick()  # resumed on 2 GPUs: a restart, as in the simulator
    job = loop.jobs[a]
    assert (job.restarts, job.preemptions, job.crash_retries) == (1, 1, 0)
    ex.crashes[a] = 2  # two worker failures, both retried
    loop.tick()
    assert (job.restarts, job.crash_retries) == (3, 2) and loop.crash_retries_total == 2
    assert kinds(store, a).count("worker-failure") == 1
    assert loop.preemptions_total == 1
    summary = store.job(a)
    assert (summary["restarts"], summary["preemptions"], summary["crash_retries"]) == (3, 1, 2)


def test_executor_events_and_launch_starts_are_recorded_once(store) -> None:
    ex = FakeExecutor()
    a = submit(store, 100)
    loop = make_loop(store, ex)
    loop.tick()
    ex.events[a] = [("killed", "killed at stop timeout: 1 worker(s) still running")]
    ex.reports[a] = {"time": 1.0, "launch": 1, "steps": 5, "epoch": 2,
                     "resumed": {"checkpoint": "ckpt-4.pt", "epoch": 2, "steps": 5}}
    loop.tick()
    loop.tick()
    ex.reports[a] = {"time": 2.0, "launch": 2, "steps": 0, "epoch": 0, "resumed": None}
    loop.tick()
    ex.reports[a] = {"time": 3.0, "launch": 2, "steps": "many"}  # malformed: ignored
    loop.tick()
    events = {e["kind"]: e["detail"] for e in store.events(a)}
    assert kinds(store, a).count("killed") == 1
    assert events["resumed"].startswith("resumed from checkpoint ckpt-4.pt at epoch 2")
    assert events["fresh"] == "started fresh (no usable checkpoint)"
    assert loop.jobs[a].report.time == 2.0


def test_gpu_time_counts_only_while_the_workers_hold_their_slots(store) -> None:
    ex = FakeExecutor()
    clock = Clock()
    a = submit(store, 100, gpus=2)
    loop = make_loop(store, ex, clock=clock)
    loop.tick()
    ex.states[a] = ExecState.QUEUED  # waiting for a stopping job to free its slots
    clock.t = 130
    loop.tick()
    job = loop.jobs[a]
    assert job.attained_gpu_s == 0 and job.queue_time_s == pytest.approx(30)
    ex.states[a] = ExecState.RUNNING
    clock.t = 140
    loop.tick()
    assert job.attained_gpu_s == pytest.approx(20) and job.run_time_s == pytest.approx(10)


def test_an_arrival_on_idle_gpus_starts_before_the_next_round(store) -> None:
    ex = FakeExecutor()
    clock = Clock()
    submit(store, 100, gpus=2)
    loop = make_loop(store, ex, clock=clock)  # interval 10 s: next round at 110
    loop.tick()
    b = submit(store, 101, gpus=2)
    clock.t = 101.5
    loop.tick()
    assert ex.plans[b].num_workers == 2  # started at once, not at 110
    c = submit(store, 102, gpus=1)  # no idle GPU left: waits for the round
    clock.t = 102.5
    loop.tick()
    assert c not in ex.plans and [k for k, _ in ex.calls].count("place") == 2
    assert loop.previous.get(b) is None  # a fill-in round is not the policy's round


def test_a_stored_job_an_older_version_accepted_is_repaired_on_restart(store) -> None:
    """A lone surrogate stored by a version without the checks made every GET /jobs fail."""
    good = submit(store, 100)
    bad = submit(store, 100)
    doc = store.job(bad)
    doc["submission"]["command"] = ["python", "-c", "print('\ud800')"]
    doc["submission"]["env"] = {"A=B": "1"}
    store.save_job(doc)
    loop = make_loop(store, FakeExecutor())
    loop.recover()
    repaired = store.job(bad)
    assert repaired["status"] == "failed" and repaired["message"].startswith("invalid submission")
    assert repaired["submission"]["command"][2] == "print('\\ud800')"
    assert set(loop.jobs) == {good}
    from corral.service.jobs import LiveJob

    assert [LiveJob.from_doc(d).summary()["id"] for d in store.jobs()] == [good, bad]


LIVE_POLICIES = [p for p in policy_names() if not policy_class(p).promises.oracle]


@pytest.mark.parametrize("policy", LIVE_POLICIES)
def test_every_policy_starts_an_arrival_on_idle_gpus_at_once(store, policy) -> None:
    ex = FakeExecutor()
    clock = Clock()
    a = submit(store, 99, gpus=2, max_gpus=2)
    loop = make_loop(store, ex, policy=policy, clock=clock)  # the next round is at 110
    loop.tick()
    assert a in ex.plans
    b = submit(store, 101, gpus=2, max_gpus=2)
    clock.t = 101.5
    loop.tick()
    assert b in ex.plans and ex.plans[a].num_workers >= 1


def _restart(store, executor, clock, shutdown_at: float | None):
    """The service stops (in order at `shutdown_at`, else killed) and a new one recovers."""
    from corral.service.server import _shutdown

    old = ControlLoop(store, executor, Scripted(), interval_s=10, clock=clock)
    if shutdown_at is not None:
        clock.t = shutdown_at
        _shutdown(old, executor, 1)
    clock.t = 119.0
    loop, policy = scripted_loop(store, FakeExecutor(), clock)
    loop.recover()
    return loop, policy


@pytest.mark.parametrize("shutdown_at", [105.0, None], ids=["stopped", "killed"])
def test_a_service_restart_is_recorded_as_one_with_the_gpus_it_held_nothing(
        store, shutdown_at) -> None:
    """A job that held GPUs when the service stopped: requeued "after a service restart", a
    0-GPU assignment from when its workers stopped (the orderly shutdown, else the restart,
    since a killed service's workers train on until reclaimed), and its next start says
    "again, after a service restart"; a job preempted before the restart still starts "again,
    after preemption"."""
    from loopkit import Clock

    clock = Clock()
    ex = FakeExecutor()
    loop, policy = scripted_loop(store, ex, clock)
    a, b = submit(store, 90), submit(store, 90)
    policy.plan = {a: 2, b: 2}
    clock.t = 90.0
    loop.tick()
    policy.plan = {a: 2}  # b preempted at the next round
    clock.t = 100.0
    loop.tick()
    loop2, policy2 = _restart(store, ex, clock, shutdown_at)
    stopped = 119.0 if shutdown_at is None else 105.0
    assert [(x["time_s"], x["num_gpus"]) for x in store.assignments(a)] == \
        [(90.0, 2), (stopped, 0)]
    assert [(x["time_s"], x["num_gpus"]) for x in store.assignments(b)] == [(90.0, 2), (100.0, 0)]
    requeued = [e for e in store.events(a) if e["kind"] == "requeued"]
    assert len(requeued) == 1 and requeued[0]["time_s"] == 119.0
    assert requeued[0]["detail"].startswith("after a service restart: the service was "
                                            + ("killed" if shutdown_at is None else "stopped"))
    assert "it held 2 GPU(s) (here:2)" in requeued[0]["detail"]
    assert "requeued" not in kinds(store, b)  # it held nothing when the service stopped
    policy2.plan = {a: 2, b: 2}
    clock.t = 130.0
    loop2.tick()
    starts = {j: [e["detail"] for e in store.events(j) if e["kind"] == "started"] for j in (a, b)}
    assert starts[a][-1].endswith("(again, after a service restart)")
    assert starts[b][-1].endswith("(again, after preemption)")
    assert "preemption" not in " ".join(starts[a])
    assert [x["num_gpus"] for x in store.assignments(a)][-1] == 2
    assert loop2.jobs[a].restarts == 1 and loop2.jobs[a].preemptions == 0


@pytest.mark.parametrize("policy, read_done", [("fifo", False), ("tiresias-gittins", True)])
def test_a_restart_reads_the_ended_jobs_once_per_stored_document_version(store, policy,
                                                                         read_done) -> None:
    """Every stored job is read (and repaired if need be) the first time a version of the
    document meets the store; later restarts read only the unfinished ones, and the finished
    ones when the policy learns from them: the restart's time no longer grows with the jobs
    that ended. A job submitted after the restart is still taken as new."""
    ended = [submit(store, 100) for _ in range(3)]
    for job_id, status in zip(ended, ("done", "failed", "cancelled"), strict=True):
        doc = store.job(job_id)
        store.save_job({**doc, "status": status})
    waiting = submit(store, 100)
    read: list[tuple[str, ...] | None] = []
    jobs_after = store.jobs_after

    def spied(seq, limit=-1, statuses=None):
        read.append(None if statuses is None else tuple(statuses))
        return jobs_after(seq, limit, statuses)

    store.jobs_after = spied
    first = make_loop(store, FakeExecutor(), policy=policy)
    first.recover()
    assert read == [None] and set(first.jobs) == {waiting}
    read.clear()
    second = make_loop(store, FakeExecutor(), policy=policy)
    second.recover()
    assert read == [("queued", "running", "done") if read_done else ("queued", "running")]
    assert set(second.jobs) == {waiting} and second._seq == first._seq
    assert len(second.completed) == len(first.completed) == (1 if read_done else 0)
    later = submit(store, 100)
    second.tick()
    assert later in second.jobs
    # a document of another version: every job read again
    store.set_meta("docs_read_version", "an older one")
    read.clear()
    make_loop(store, FakeExecutor(), policy=policy).recover()
    assert read == [None]
