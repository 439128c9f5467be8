"""Every registered policy's `Promises`, checked from the registry: a run taking the shortcuts
its promises allow (placement views shown again, rounds skipped, decisions kept without asking)
ends every job exactly as a run that trusts none of them (`EngineConfig(trust_promises=False)`:
asked at every round with fresh full views). A policy that promises what it does not keep is
caught, and a declaration that contradicts itself is refused at registration."""

from __future__ import annotations

import dataclasses

import pytest

from corral.core import policy as policy_module
from corral.core.cluster import Cluster
from corral.core.jobs import Assignment, Decision, Snapshot
from corral.core.policy import (
    Changes,
    Keeps,
    Policy,
    Promises,
    Reads,
    register_policy,
)
from corral.policies import create_policy, policy_class, policy_names
from corral.policies.fifo import Fifo
from corral.policies.placement import consolidated, free_gpus, take
from corral.policies.tiresias import TiresiasLas
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import Workload, synthetic

#: Small enough for every policy, busy enough that jobs wait, are preempted and resized.
_JOBS, _RATE_PER_HOUR, _CLUSTER = 24, 40, "4x4"


def _workload() -> Workload:
    truth = CatalogTruth()
    return synthetic(truth.limits(), num_jobs=_JOBS, rate_per_hour=_RATE_PER_HOUR, seed=3,
                     mix={"cifar10": 0.5, "ncf": 0.3, "deepspeech2": 0.2})


def _outcome(policy: Policy, trust: bool) -> list[tuple[str, float | None, int]]:
    """(name, finish time, restarts) of every job of a run of `policy`."""
    config = EngineConfig(trust_promises=trust)
    result = Simulator(CatalogTruth(), policy, Cluster.parse(_CLUSTER), config).run(_workload())
    return [(j.name, j.finish_s, j.restarts) for j in result.jobs]


def _same(kept: list[tuple], every: list[tuple]) -> bool:
    """The same restarts, and the same finish times within a millisecond (a job advanced over
    skipped rounds in one step sums its floats differently; a broken promise moves a decision
    by a round, 60 s)."""
    return [(n, r) for n, _, r in kept] == [(n, r) for n, _, r in every] and all(
        f == g or (f is not None and g is not None and abs(f - g) < 1e-3)
        for (_, f, _), (_, g, _) in zip(kept, every))


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_ends_every_job_as_without_its_shortcuts(name: str) -> None:
    every = _outcome(create_policy(name), False)
    assert all(finish is not None for _, finish, _ in every)  # the workload runs to its end
    assert _same(_outcome(create_policy(name), True), every)


class _FifoWatchingTheClock(Fifo):
    """fifo that also preempts a job that has run for over an hour since it was last placed
    (to place it again later): it reads the clock and the books, yet it promises to read only
    placements and to change its decision only on a change."""

    name = "test-fifo-watching-the-clock"

    def decide(self, snapshot: Snapshot) -> Decision:
        out = dict(super().decide(snapshot).assignments)
        for view in snapshot.jobs:
            if view.assignment and snapshot.time_s - (view.last_change_s or 0.0) > 3600:
                out.pop(view.name, None)
        return Decision(out)


class _LeastServedFirst(Policy):
    """Gang-schedules jobs at their GPU counts, least GPU time first: as jobs run their order
    changes, so its promise to keep a decision until a job arrives or leaves is false."""

    name = "test-least-served-first"
    promises = Promises(keeps=Keeps.DECISION_UNTIL_CHANGE)

    def decide(self, snapshot: Snapshot) -> Decision:
        free = free_gpus(snapshot.cluster, {})
        out = {}
        for view in sorted(snapshot.jobs, key=lambda v: (v.attained_gpu_s, v.spec.submit_time_s)):
            placement = consolidated(free, view.spec.gpus)
            if placement is not None:
                take(free, placement)
                out[view.name] = Assignment(placement)
        return Decision(out)


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Policies registered by a test are known only during it."""
    monkeypatch.setattr(policy_module.REGISTERED, "_classes",
                        dict(policy_module.REGISTERED._classes))


@pytest.mark.usefixtures("scratch_registry")
@pytest.mark.parametrize("liar", [_FifoWatchingTheClock, _LeastServedFirst])
def test_a_policy_that_breaks_its_promises_is_caught(liar: type[Policy]) -> None:
    register_policy(liar)  # its declaration is consistent: only a run can show it false
    assert not _same(_outcome(liar(), True), _outcome(liar(), False))


@pytest.mark.parametrize("promises,problem", [
    (Promises(reads=Reads.PLACEMENTS | Reads.ORACLE), "contradicts reading oracle info"),
    (Promises(reads=Reads.PLACEMENTS | Reads.COMPLETED), "contradicts reading oracle info"),
    (Promises(reads=Reads.ORACLE), "exactly one of Reads.PLACEMENTS or Reads.VIEWS"),
    (Promises(reads=Reads.VIEWS | Reads.PLACEMENTS), "exactly one of"),
])
@pytest.mark.usefixtures("scratch_registry")
def test_contradictory_promises_are_refused_at_registration(promises: Promises,
                                                            problem: str) -> None:
    class Contradicting(Fifo):
        name = "test-contradicting"

    Contradicting.promises = promises
    with pytest.raises(ValueError, match=f"'test-contradicting': contradictory promises: .*{problem}"):
        register_policy(Contradicting)
    assert "test-contradicting" not in policy_names()


@pytest.mark.usefixtures("scratch_registry")
def test_a_standing_decision_needs_no_promise_to_stand_until_a_change() -> None:
    class Both(TiresiasLas):
        name = "test-both"
        promises = Promises(keeps=Keeps.DECISION_UNTIL_CHANGE)

    with pytest.raises(ValueError, match="stands_until"):
        register_policy(Both)


@pytest.mark.usefixtures("scratch_registry")
def test_promises_are_typed_and_frozen() -> None:
    with pytest.raises(TypeError, match="Promises.reacts_to must be a Changes"):
        Promises(reacts_to=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Promises.keeps must be a Keeps"):
        Promises(keeps=Changes.ARRIVAL)  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy_class("fifo").promises.keeps = Keeps.NOTHING  # type: ignore[misc]
    with pytest.raises(ValueError, match="must be a Promises"):
        register_policy(type("Loose", (Fifo,), {"name": "test-loose", "promises": True}))


def test_without_shortcuts_keeps_what_a_policy_needs_to_read_and_react_to() -> None:
    sidecar = policy_class("sidecar").promises.without_shortcuts()
    assert sidecar.reads == Reads.VIEWS | Reads.ORACLE and sidecar.keeps == Keeps.NOTHING
    assert sidecar.reacts_to == policy_class("sidecar").promises.reacts_to
    assert policy_class("fifo").promises.without_shortcuts().reads == Reads.VIEWS
