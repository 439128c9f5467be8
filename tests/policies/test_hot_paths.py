"""The policies' per-round shortcuts decide what the plain computation decides."""

from __future__ import annotations

import random

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import Assignment, BatchConfig, JobSpec, JobStatus, JobView
from corral.policies.placement import consolidated, gang_allocate
from corral.policies.tiresias import TiresiasLas, TiresiasParams, spread_fill


def _consolidated_reference(free: list[int], num_gpus: int) -> Placement | None:
    """The one-node choice as it was written before: min((free, node)) of the nodes that fit."""
    if num_gpus <= 0 or num_gpus > sum(free):
        return None
    fits = [(g, n) for n, g in enumerate(free) if g >= num_gpus]
    if fits:
        _, node = min(fits)
        return Placement(((node, num_gpus),))
    return consolidated(free, num_gpus)  # several nodes: unchanged code


def test_consolidated_one_node_choice_unchanged() -> None:
    rng = random.Random(0)
    for _ in range(2000):
        free = [rng.choice((0, 0, 1, 2, 3, 4, 8)) for _ in range(rng.randint(1, 40))]
        k = rng.randint(0, 10)
        assert consolidated(list(free), k) == _consolidated_reference(list(free), k), (free, k)


def _spread_fill_reference(free: list[int], num_gpus: int) -> Placement | None:
    """`spread_fill` as it was written before: nodes sorted by a (free, node) key function."""
    if num_gpus <= 0 or num_gpus > sum(free):
        return None
    slots: dict[int, int] = {}
    left = num_gpus
    for n in sorted((n for n, g in enumerate(free) if g > 0), key=lambda n: (free[n], n)):
        k = min(free[n], left)
        slots[n] = k
        left -= k
        if left == 0:
            break
    return Placement.of(slots)


def test_spread_fill_unchanged() -> None:
    rng = random.Random(1)
    for _ in range(2000):
        free = [rng.choice((0, 0, 1, 2, 3, 4)) for _ in range(rng.randint(1, 40))]
        k = rng.randint(0, 12)
        assert spread_fill(list(free), k) == _spread_fill_reference(list(free), k), (free, k)


def _view(name: str, gpus: int, assignment: Assignment | None) -> JobView:
    spec = JobSpec(name=name, submit_time_s=0.0, app="a", gpus=gpus, batch_size=64, init_bsz=64,
                   max_bsz=64, min_local_bsz=1, max_local_bsz=64)
    status = JobStatus.RUNNING if assignment else JobStatus.PENDING
    return JobView(spec, status, assignment, 0.0, 0.0, 0.0, 0, 0, 0, 0.0, 0, None, None, None,
                   None)


def test_gang_allocate_hands_a_kept_job_its_own_assignment() -> None:
    cluster = Cluster.parse("2x4")
    kept = Assignment(Placement.of([(0, 2)]), BatchConfig(32, 0))
    other = Assignment(Placement.of([(1, 2)]), BatchConfig(7, 0))  # kept, another batch now
    views = [_view("a", 2, kept), _view("b", 2, other), _view("c", 4, None)]
    out = gang_allocate(cluster, views, lambda v: v.spec.gpus,
                        batch_of=lambda v, p: v.spec.user_batch(p.num_gpus))
    assert out["a"] is kept
    assert out["b"] == Assignment(other.placement, BatchConfig(32, 0))
    assert out["c"].placement == Placement.of([(0, 2), (1, 2)])
    plain = gang_allocate(cluster, views, lambda v: v.spec.gpus)  # no batch: a new one
    assert plain["a"] == Assignment(kept.placement, None)


def test_queue_of_is_the_first_queue_whose_bound_is_above() -> None:
    for hours, queues in (("1", 2), ("1", 4), ("1,1,3", 4), ("0.5,2", 3)):
        pol = TiresiasLas(TiresiasParams(queues=queues, threshold_gpu_h=hours))
        bounds = pol.params.thresholds_gpu_s()
        for attained in (0.0, 1799.0, 1800.0, 3599.9, 3600.0, 7200.0, 1e9, float("nan")):
            first = next((i for i, hi in enumerate(bounds) if attained < hi), len(bounds))
            assert pol.queue_of(attained) == first, (hours, queues, attained)
