"""`Reads.PLACEMENTS`: a policy that decides from each job's spec, status and
assignment alone may be shown a job's earlier view again while those are unchanged
(`SimJob.placement_view`). Every policy that says so must decide exactly as with fresh views,
at every round; a policy that reads progress behind that promise is caught."""

from __future__ import annotations

import dataclasses

import pytest

from corral.core.cluster import NO_PLACEMENT, Cluster, Placement
from corral.core.jobs import Assignment, Decision, Snapshot
from corral.core.policy import Reads
from corral.policies import create_policy, policy_class, policy_names
from corral.policies.fifo import Fifo
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.loop.job import SimJob
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import synthetic

PROMISING = [n for n in policy_names() if policy_class(n).promises.placements_only]


def _run(base: type, params: dict, reuse: bool) -> tuple[list, object, int, int]:
    """Every decision of a 160-job run of `base` (with views reused or always fresh), the
    result, and how many views and distinct view objects the policy was shown."""
    reads = base.promises.reads & ~(Reads.PLACEMENTS | Reads.VIEWS)

    class Run(base):  # type: ignore[misc, valid-type]
        promises = dataclasses.replace(
            base.promises, reads=reads | (Reads.PLACEMENTS if reuse else Reads.VIEWS))

    policy = Run(create_policy(base.name, params).params) if params else Run()
    decisions: list = []
    shown: list = []
    decide = policy.decide

    def recorded(snapshot: Snapshot) -> Decision:
        shown.extend(snapshot.jobs)
        decision = decide(snapshot)
        decisions.append((snapshot.time_s, dict(decision.assignments)))
        return decision

    policy.decide = recorded  # type: ignore[method-assign]
    truth = CatalogTruth()
    workload = synthetic(truth.limits(), num_jobs=160, rate_per_hour=20, seed=3)
    result = Simulator(truth, policy, Cluster.uniform(16, 4), EngineConfig()).run(workload)
    return decisions, result, len(shown), len({id(v) for v in shown})


def _same_as_fresh(base: type, params: dict) -> bool:
    reused, kept, views, distinct = _run(base, params, True)
    fresh, every, _, _ = _run(base, params, False)
    assert distinct < views / 2  # views were shown again, often
    return reused == fresh and kept.jobs == every.jobs and kept.rounds == every.rounds


def test_fifo_promises_it() -> None:
    assert "fifo" in PROMISING


@pytest.mark.parametrize("name,params", [(n, {}) for n in PROMISING] + [("fifo", {"backfill": "true"})])
def test_a_policy_reading_only_placements_decides_as_with_fresh_views(name: str,
                                                                        params: dict) -> None:
    assert _same_as_fresh(policy_class(name), params)


class _PreemptsLongRunners(Fifo):
    """fifo that also stops any job that has held GPUs for over an hour: it reads progress."""

    name = "fifo-preempting-long-runners"

    def decide(self, snapshot: Snapshot) -> Decision:
        decision = super().decide(snapshot)
        out = dict(decision.assignments)
        for view in snapshot.jobs:
            if view.run_time_s > 3600 and view.name in out:
                del out[view.name]
        return Decision(out)


def test_a_policy_reading_progress_behind_the_promise_is_caught() -> None:
    assert not _same_as_fresh(_PreemptsLongRunners, {})


def test_a_placement_view_is_shown_again_until_status_or_assignment_changes() -> None:
    truth = CatalogTruth()
    spec = synthetic(truth.limits(), num_jobs=1, rate_per_hour=1, seed=0).jobs[0]
    job = SimJob(spec, truth.app(spec.app))
    waiting = job.placement_view()
    job.advance(spec.submit_time_s + 60)
    assert job.placement_view() is waiting  # still waiting: its queue time is not shown anew
    placed = Placement.of([(0, spec.gpus)])
    job.assign(spec.submit_time_s + 60, Assignment(placed), pause_s=0.0)
    running = job.placement_view()
    assert running is not waiting and running.assignment.placement == placed
    job.advance(spec.submit_time_s + 600)
    assert job.placement_view() is running and job.view().run_time_s > running.run_time_s
    fixed = spec.user_batch(spec.gpus)
    job.assign(spec.submit_time_s + 600, Assignment(placed, fixed), pause_s=0.0)  # the policy fixes the batch
    assert job.placement_view() is not running and job.placement_view().assignment.batch == fixed
    job.assign(spec.submit_time_s + 660, Assignment(NO_PLACEMENT), pause_s=0.0)  # preempted
    assert job.placement_view().assignment is None and job.placement_view().status is waiting.status
