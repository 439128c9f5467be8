"""`Keeps.RUNNING_WHEN_NONE_WAITS`: a gang scheduler that admits jobs by their fixed GPU
count and never moves an admitted running job gives every job what it runs whenever no job
waits, so the engine and the live loop keep its last decision without asking
(`corral.core.rounds.Rounds.should_decide`). Here the policy is asked anyway and must answer so, and a
run that does not ask keeps every job's books, the rounds and the GPU timeline exactly."""

from __future__ import annotations

import dataclasses

import pytest

from corral.core.cluster import Cluster
from corral.core.jobs import STATUS_RUNNING, Decision, Snapshot
from corral.core.policy import Keeps
from corral.policies import create_policy, policy_class, policy_names
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import synthetic


def _asked_anyway(name: str, params: dict):
    """The policy `name` with the promise off, checking at each round where every active job
    runs that its decision gives each job the assignment it runs with."""
    base = policy_class(name)

    class AskedAnyway(base):  # type: ignore[misc, valid-type]
        promises = dataclasses.replace(
            base.promises, keeps=base.promises.keeps & ~Keeps.RUNNING_WHEN_NONE_WAITS)

        def __init__(self, p) -> None:
            super().__init__(p)
            self.checked = 0  # rounds at which every job ran
            self.calls = 0

        def decide(self, snapshot: Snapshot) -> Decision:
            self.calls += 1
            decision = super().decide(snapshot)
            if all(v.status is STATUS_RUNNING for v in snapshot.jobs):
                assert dict(decision.assignments) == {v.name: v.assignment for v in snapshot.jobs}, \
                    snapshot.time_s
                self.checked += 1
            return decision

    return AskedAnyway(create_policy(name, params).params)


#: Every policy that promises it, as registered, and settings that change how it keeps jobs.
KEEPERS = [n for n in policy_names() if policy_class(n).promises.keeps_running]


@pytest.mark.parametrize("name,params,interference", [(n, {}, 0.0) for n in KEEPERS] + [
    ("fifo", {"backfill": "true"}, 0.0),
    ("tiresias-las", {"queues": "3", "threshold_gpu_h": "0.25"}, 0.0),
    ("tiresias-las", {"promote_knob": "2"}, 0.3)])
def test_a_kept_decision_is_the_one_the_policy_would_make(name: str, params: dict,
                                                          interference: float) -> None:
    truth = CatalogTruth()
    workload = synthetic(truth.limits(), num_jobs=160, rate_per_hour=20, seed=3)
    cluster = Cluster.uniform(16, 4)
    config = EngineConfig(interference_slowdown=interference)
    asked = _asked_anyway(name, params)
    keeping = create_policy(name, params)
    assert keeping.promises.keeps_running
    calls: list[float] = []
    decide = keeping.decide
    keeping.decide = lambda s: calls.append(s.time_s) or decide(s)  # type: ignore[method-assign]
    every = Simulator(truth, asked, cluster, config).run(workload)
    kept = Simulator(truth, keeping, cluster, config).run(workload)
    assert asked.checked > 40  # the promise was tested at many rounds ...
    assert len(calls) <= asked.calls - asked.checked  # ... and those rounds were not asked
    assert kept.jobs == every.jobs and kept.rounds == every.rounds
    assert kept.gpu_timeline == every.gpu_timeline


def test_the_engine_counts_waiting_jobs_through_arrivals_starts_and_preemptions() -> None:
    """`none_waits` comes from a count the engine keeps as jobs arrive, start, are preempted
    and finish; at every decision it equals the jobs the snapshot shows without GPUs."""
    truth = CatalogTruth()
    workload = synthetic(truth.limits(), num_jobs=160, rate_per_hour=60, seed=3)
    policy = create_policy("tiresias-las", {"queues": "3", "threshold_gpu_h": "0.25"})
    sim = Simulator(truth, policy, Cluster.uniform(8, 4), EngineConfig())
    seen: list[int] = []
    decide = policy.decide

    def counted(snapshot: Snapshot) -> Decision:
        waiting = sum(v.status is not STATUS_RUNNING for v in snapshot.jobs)
        assert sim._waiting == waiting, snapshot.time_s
        seen.append(waiting)
        return decide(snapshot)

    policy.decide = counted  # type: ignore[method-assign]
    result = sim.run(workload)
    assert max(seen) > 10 and sum(r.restarts for r in result.jobs) > 0  # resumed after preemption
