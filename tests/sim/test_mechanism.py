"""Execution mechanisms: what each kind of placement change costs, GPU hand-over between jobs,
and restarting from the last completed epoch."""

from __future__ import annotations

import pytest

from corral.core import (
    Assignment,
    BatchConfig,
    Changes,
    Cluster,
    Decision,
    InputError,
    JobSpec,
    Placement,
    Policy,
    Promises,
    Snapshot,
)
from corral.core.jobs import LrRule
from corral.perf.overheads import OVERHEADS
from corral.policies import create_policy
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.loop.mechanism import (
    CheckpointRestart,
    GpuHandover,
    Mechanism,
    mechanism_named,
    mechanism_names,
)
from corral.sim.truth.base import AppLimits, AppTruth, Truth
from corral.sim.workloads import Workload

P = Placement.of


def test_every_named_mechanism_builds_and_unknown_names_are_one_line_errors():
    for name in mechanism_names():
        assert mechanism_named(name).name == name
    assert mechanism_named("checkpoint-restart", 12.0).pause_s("a", P({}), P({0: 1})) == 12.0
    with pytest.raises(InputError, match="unknown mechanism 'teleport'; known: checkpoint-restart"):
        mechanism_named("teleport")


def test_reshaping_costs_by_kind_of_change():
    sidecar, term, ones = (Mechanism(OVERHEADS[n]) for n in ("sidecar", "termination", "in-place"))
    two, four = P({0: 2}), P({0: 4})
    assert sidecar.pause_s("a", P({}), two) == 110.0  # Kubernetes + process initialisation
    assert sidecar.pause_s("a", four, two) == 27.0  # §II-C reshaping down
    assert sidecar.pause_s("a", two, four) == 37.0  # §II-C reshaping up
    assert sidecar.pause_s("a", two, P({0: 2, 1: 2})) == 242.0  # other host: Kubernetes restart
    # the donor's pause after a termination shrink is solved from the §II-C timeline
    assert term.pause_s("a", four, two) == 117.0 and term.pause_s("a", two, four) == 242.0
    assert ones.pause_s("a", two, four) == 1.0 and ones.pause_s("a", P({}), two) == 20.0
    assert sidecar.pause_s("a", two, P({})) == 0.0  # preemption itself costs the job nothing
    # waiting for GPUs being released: added without early initialisation, overlapped with it
    assert term.pause_s("a", P({}), two, wait_s=64.0) == 110.0 + 64.0
    assert sidecar.pause_s("a", P({}), two, wait_s=64.0) == 110.0
    assert CheckpointRestart(30.0).pause_s("a", two, four) == 30.0


def test_handover_new_job_waits_for_gpus_still_being_released():
    term = Mechanism(OVERHEADS["termination"])
    ledger = GpuHandover([4, 4])
    ledger.released(P({0: 3}), at_s=164.0)  # a job finished at 100 s; pods gone at 164 s
    # at 100 s: node 0 has 1 idle GPU and 3 releasing; node 1 is held by another job
    pauses = ledger.pauses(100.0, term, [
        ("a", P({}), P({0: 1})),  # takes the idle GPU: no wait
        ("b", P({}), P({0: 2})),  # takes two releasing GPUs: waits 64 s, then starts
        ("c", P({1: 4}), P({1: 4})),  # unchanged
    ])
    assert pauses == [110.0, 64.0 + 110.0, 0.0]


def test_handover_donor_gpus_under_termination_and_sidecar():
    change = [("donor", P({0: 4}), P({0: 2})), ("new", P({}), P({0: 2}))]
    assert GpuHandover([4]).pauses(180.0, Mechanism(OVERHEADS["termination"]), change) == [117.0, 204.0]
    assert GpuHandover([4]).pauses(180.0, Mechanism(OVERHEADS["sidecar"]), change) == [27.0, 110.0]
    assert GpuHandover([4]).pauses(0.0, CheckpointRestart(), change) == [30.0, 30.0]


# -- progress lost on resize -------------------------------------------------------------------

class SteadyApp(AppTruth):
    """0.1 s per step on any placement, 3 epochs of 600 steps (60 s each), gain 1."""

    def __init__(self) -> None:
        self.limits = AppLimits("s", 10, 10, 10, 10, 3, LrRule.LINEAR, adaptive=False, fixed_bsz=10)

    def step_time(self, counts, local_bsz):
        return 0.1, 0.0

    def grad_stats(self, total_bsz, epoch):
        return 1.0, 0.0

    def gain(self, total_bsz, epoch):
        return 1.0

    def epoch_progress(self):
        return (600.0, 1200.0, 1800.0)


class OneApp(Truth):
    source = "test"

    def apps(self):
        return {"s": SteadyApp()}


class MoveOnceAt(Policy):
    """One GPU on node 0; at `move_s` (a round) the job moves to node 1."""

    name = "move-once"
    promises = Promises(reacts_to=Changes.ARRIVAL | Changes.COMPLETION)

    def __init__(self, move_s: float) -> None:
        super().__init__()
        self.move_s = move_s

    def decide(self, snapshot: Snapshot) -> Decision:
        node = 1 if snapshot.time_s >= self.move_s else 0
        return Decision({v.name: Assignment(P({node: 1}), BatchConfig(10)) for v in snapshot.jobs})


def run_one(mechanism: str, move_s: float, interval: float = 10.0):
    spec = JobSpec("j", 0.0, "s", 1, 10, 10, 10, 10, 10, adaptive=False, epochs=3)
    sim = Simulator(OneApp(), MoveOnceAt(move_s), Cluster.parse("2x1"),
                    EngineConfig(interval_s=interval, mechanism=mechanism_named(mechanism)))
    return sim.run(Workload("w", [spec], "test")).jobs[0]


def test_termination_epoch_restarts_from_last_completed_epoch():
    # Kubernetes start 110 s; epoch 1 ends at 170 s; moved to the other node (a 242 s restart)
    # at 200 s: without a checkpoint the 30 s done of epoch 2 are lost.
    keep = run_one("termination", 200.0)
    lose = run_one("termination-epoch", 200.0)
    # with a checkpoint: 110 s start + 180 s of training + the restart
    assert keep.finish_s == pytest.approx(110 + 180 + 242)
    assert lose.finish_s == pytest.approx(keep.finish_s + 30.0)
    assert keep.restarts == lose.restarts == 1


def test_default_kubernetes_start_waits_for_finished_job_pods():
    # fifo on one 1-GPU node: b starts when a's pods are gone (64 s) plus its own start (110 s)
    specs = [JobSpec(n, 0.0, "s", 1, 10, 10, 10, 10, 10, adaptive=False, epochs=3) for n in "ab"]
    sim = Simulator(OneApp(), create_policy("fifo"), Cluster.parse("1x1"),
                    EngineConfig(interval_s=1.0, mechanism=mechanism_named("termination")))
    jobs = {j.name: j for j in sim.run(Workload("w", specs, "test")).jobs}
    assert jobs["a"].finish_s == pytest.approx(110 + 180)
    assert jobs["b"].finish_s == pytest.approx(jobs["a"].finish_s + 64 + 110 + 180, abs=1.0)


class WatchStarts(MoveOnceAt):
    """`MoveOnceAt`, recording each round's (time, last_start_s, last_change_s) of its job."""

    def __init__(self, move_s: float) -> None:
        super().__init__(move_s)
        self.seen: list[tuple[float, float | None, float | None]] = []

    def decide(self, snapshot: Snapshot) -> Decision:
        self.seen += [(snapshot.time_s, v.last_start_s, v.last_change_s) for v in snapshot.jobs]
        return super().decide(snapshot)


@pytest.mark.parametrize("mechanism, restarted", [("in-place", False), ("sidecar", True),
                                                  ("checkpoint-restart", True)])
def test_a_move_in_place_keeps_the_jobs_last_start(mechanism: str, restarted: bool) -> None:
    # the engine tells the books whether a change launched a new worker set
    # (`Mechanism.relaunches`): ONES moves a job to another host in place, SideCar and
    # checkpoint-restart restart it; `min_runtime_s` counts from that start (issue 43)
    spec = JobSpec("j", 0.0, "s", 1, 10, 10, 10, 10, 10, adaptive=False, epochs=3)
    policy = WatchStarts(100.0)
    Simulator(OneApp(), policy, Cluster.parse("2x1"),
              EngineConfig(interval_s=10.0, mechanism=mechanism_named(mechanism))).run(
        Workload("w", [spec], "test"))
    after = [(start, change) for t, start, change in policy.seen if t > 100.0]
    assert after and after[0] == ((100.0 if restarted else 0.0), 100.0)
