"""No churn (issue 43): a decision that gives a job the GPUs it holds, in whatever order it names
them, is no restart, in the simulator's engine and in the live control loop alike; a queue tree
protects a job that just (re)started for `min_runtime_s` (default 30 s), shown by `corral
queues`."""

from __future__ import annotations

from fakes import FakeExecutor
from loopkit import Clock, submit
from typer.testing import CliRunner

from corral.cli.main import app
from corral.core.cluster import Cluster, Node, Placement
from corral.core.jobs import Assignment, Decision, Snapshot
from corral.core.policy import Policy
from corral.core.queues import DEFAULT_MIN_RUNTIME_S, parse_queues, proportional_queues
from corral.service.loop import ControlLoop
from corral.sim.loop.engine import Simulator
from corral.sim.truth.source import TruthSource
from corral.sim.workloads.common import Workload, make_job

FORWARD, BACKWARD = ((0, 2), (1, 2)), ((1, 2), (0, 2))


class Reorders(Policy):
    """Gives every job all four GPUs of two nodes, naming the nodes in the other order each
    time it is asked."""

    name = "reorders"

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def decide(self, snapshot: Snapshot) -> Decision:
        self.asked += 1
        slots = FORWARD if self.asked % 2 else BACKWARD
        return Decision({v.name: Assignment(Placement(slots)) for v in snapshot.jobs[:1]})


def test_the_same_gpus_in_another_order_are_the_same_placement() -> None:
    assert Placement(BACKWARD) == Placement(FORWARD) and Placement(BACKWARD).slots == FORWARD
    assert Placement(((1, 1), (1, 1))) == Placement(((1, 2),))
    assert Placement(((1, 2), (0, 2))).num_gpus == 4


def test_the_engine_keeps_a_job_given_its_gpus_again_in_another_order() -> None:
    truth = TruthSource.of(None, None).load()
    limits = truth.limits()["cifar10"]
    job = make_job("j", 0.0, "cifar10", limits, 4, limits.init_bsz)
    policy = Reorders()
    result = Simulator(truth, policy, Cluster.parse("2x2")).run(Workload("w", [job], "test"))
    record = result.jobs[0]
    assert policy.asked > 2  # asked many times, told the other order each time
    assert record.restarts == 0 and record.queue_time_s == 0  # never stopped, never resized


class TwoNodes(FakeExecutor):
    def cluster(self) -> Cluster:
        return Cluster((Node("n0", 2), Node("n1", 2)))


def test_the_live_loop_keeps_a_job_given_its_gpus_again_in_another_order(store) -> None:
    executor, clock = TwoNodes(), Clock()
    job = submit(store, 100, gpus=4)
    loop = ControlLoop(store, executor, Reorders(), interval_s=10, clock=clock)
    for t in (100.0, 110.0, 120.0, 130.0):
        clock.t = t
        loop.tick()
    assert loop.policy.asked >= 3  # type: ignore[attr-defined]
    assert [what for what, _ in executor.calls] == ["place"]  # started once, never again
    assert [e["kind"] for e in store.events(job)] == ["started"]
    assert loop.jobs[job].restarts == 0 and loop.restarts_total == 0


def test_min_runtime_has_a_default_and_a_file_may_set_it() -> None:
    assert DEFAULT_MIN_RUNTIME_S == 30.0
    assert parse_queues("[queue.a]\nquota = 1\n").min_runtime_s == 30.0
    assert parse_queues("min_runtime_s = 0\n[queue.a]\nquota = 1\n").min_runtime_s == 0.0
    assert proportional_queues({"a": 1.0}, 4).min_runtime_s == 30.0


class QueuesClient:
    def __init__(self, doc: dict) -> None:
        self.doc = doc

    def __enter__(self) -> QueuesClient:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False

    def queues(self) -> dict:
        return self.doc


def test_corral_queues_shows_min_runtime(monkeypatch) -> None:
    row = {"name": "a", "parent": None, "quota": 2, "limit": None, "used": 1, "borrowed": 0,
           "share": 2, "jobs": 1, "waiting": 0, "quota_by_type": None, "limit_by_type": None}
    doc = {"queues": [row], "total_gpus": 4, "min_runtime_s": 30.0, "usage_half_life_s": None}
    monkeypatch.setattr("corral.cli.live._client", lambda *a: QueuesClient(doc))
    out = CliRunner().invoke(app, ["queues"])
    assert out.exit_code == 0, out.output
    assert "min_runtime_s 30: a job (re)started less than 30 s ago is not preempted" in out.stdout
    assert "usage_half_life_s" not in out.stdout
    doc.update(min_runtime_s=0.0, usage_half_life_s=3600.0)
    out = CliRunner().invoke(app, ["queues"])
    assert "min_runtime_s 0:" in out.stdout and "usage_half_life_s 3600" in out.stdout
