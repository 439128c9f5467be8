"""Every registered policy says why it leaves a job waiting (`Decision.reasons`), generated
from the registry: a new policy that leaves jobs waiting without a reason fails here."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from corral.core.cluster import Cluster
from corral.core.jobs import Decision, Snapshot
from corral.core.policy import Policy
from corral.core.reasons import WaitKind
from corral.policies import create_policy, policy_names
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import synthetic

#: Busy enough on a small cluster that every policy leaves jobs waiting.
_JOBS, _RATE_PER_HOUR = 32, 120


def _watched(policy: Policy, seen: list[tuple[str, str, str]]) -> Policy:
    """`policy` with each job its decisions leave without GPUs recorded as (job, kind, text)."""
    decide = policy.decide

    def watching(snapshot: Snapshot) -> Decision:
        decision = decide(snapshot)
        for view in snapshot.jobs:
            if decision.get(view.name) is None:
                reason = decision.reasons.get(view.name)
                seen.append((view.name, reason.kind.value if reason else "",
                             reason.text if reason else ""))
        return decision
    policy.decide = watching  # type: ignore[method-assign]
    return policy


def _silent(policy: Policy) -> Policy:
    """`policy` with the reasons of its decisions dropped (a policy that says nothing)."""
    decide = policy.decide
    policy.decide = lambda snapshot: Decision(  # type: ignore[method-assign]
        decide(snapshot).assignments)
    return policy


def test_a_policy_that_leaves_jobs_waiting_without_a_reason_is_caught() -> None:
    with pytest.raises(AssertionError, match="gave no reason"):
        test_every_policy_gives_its_own_reason_for_each_job_it_leaves_waiting("fifo", _silent)


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_gives_its_own_reason_for_each_job_it_leaves_waiting(
        name: str, wrap: Callable[[Policy], Policy] = lambda policy: policy) -> None:
    truth = CatalogTruth()
    workload = synthetic(truth.limits(), num_jobs=_JOBS, rate_per_hour=_RATE_PER_HOUR, seed=5,
                         mix={"cifar10": 0.5, "ncf": 0.3, "deepspeech2": 0.2})
    seen: list[tuple[str, str, str]] = []
    jobs = []
    for cluster in ("2x8", "k80:2x8,v100:1x8"):  # one GPU type, and two
        jobs += Simulator(truth, _watched(wrap(create_policy(name)), seen),
                          Cluster.parse(cluster),
                          EngineConfig(max_time_s=4 * 3600.0)).run(workload).jobs
    assert seen, f"{name} left no job waiting: the workload does not test it"
    silent = [job for job, kind, text in seen if not kind or not text.strip()]
    assert not silent, f"{name} gave no reason for {sorted(set(silent))[:5]}"
    assert {kind for _, kind, _ in seen} <= {k.value for k in WaitKind} - {
        WaitKind.ARRIVING.value, WaitKind.UNEXPLAINED.value}
    # the simulator sums the waits by the reasons given: none unexplained, and every second
    # of a job's wait is under some reason
    for job in jobs:
        assert job.waited_by_reason.get(WaitKind.UNEXPLAINED.value, 0.0) == 0.0
        assert sum(job.waited_by_reason.values()) == pytest.approx(job.queue_time_s, abs=1e-6)
