"""Optimus: marginal-gain allocation, Theorem-1 placement, and the two policies' remaining work."""

from __future__ import annotations

import numpy as np
import pytest

from corral.core.cluster import Cluster, Placement
from corral.core.errors import UnknownPolicyError
from corral.core.jobs import Decision, JobSpec, JobStatus, JobView, OracleInfo, Snapshot
from corral.perf.convergence import LossCurve, predict_total_epochs
from corral.perf.estimator import JobEstimator
from corral.policies import create_policy
from corral.policies.optimus import (
    USER_DELTA,
    EvenPlacer,
    JobDemand,
    borrowed_epoch_steps,
    fewest_nodes_even,
    marginal_gain_allocation,
    steps_per_epoch,
)
from corral.policies.placement import take

INF = np.inf


def test_marginal_gain_picks_the_hand_computed_job() -> None:
    # A: 1000 steps left, 1.0 / 0.6 / 0.5 s per step on 1 / 2 / 3 GPUs.
    # B: 3000 steps left, 0.5 / 0.4 / 0.35 s per step.
    a = JobDemand("a", 1000, np.array([INF, 1.0, 0.6, 0.5]))
    b = JobDemand("b", 3000, np.array([INF, 0.5, 0.4, 0.35]))
    # Each gets 1 GPU. Gains of a second GPU: A 1000 x 0.4 = 400 > B 3000 x 0.1 = 300 -> A.
    assert marginal_gain_allocation([a, b], 3) == {"a": 2, "b": 1}
    # Next: A's third GPU 1000 x 0.1 = 100 < B's second 300 -> B.
    assert marginal_gain_allocation([a, b], 4) == {"a": 2, "b": 2}
    # Then A 100 vs B's third 3000 x 0.05 = 150 -> B; then A (B is at its 3-GPU cap).
    assert marginal_gain_allocation([a, b], 5) == {"a": 2, "b": 3}
    assert marginal_gain_allocation([a, b], 9) == {"a": 3, "b": 3}


def test_allocation_stops_at_non_positive_gain_and_shortage() -> None:
    flat = JobDemand("flat", 1e6, np.array([INF, 1.0, 1.0, 1.2]))
    unknown = JobDemand("new", 10, None)
    assert marginal_gain_allocation([flat, unknown], 8) == {"flat": 1, "new": 1}
    # More jobs than GPUs: the earliest get their one GPU.
    assert marginal_gain_allocation([unknown, flat], 1) == {"new": 1, "flat": 0}
    # Ties go to the earlier job.
    x = JobDemand("x", 1, np.array([INF, 2.0, 1.0]))
    y = JobDemand("y", 1, np.array([INF, 2.0, 1.0]))
    assert marginal_gain_allocation([x, y], 3) == {"x": 2, "y": 1}


def test_placement_uses_fewest_nodes_split_evenly() -> None:
    assert fewest_nodes_even([4, 4, 2, 1], 4) == Placement(((0, 4),))
    assert fewest_nodes_even([4, 4, 2, 1], 6) == Placement(((0, 3), (1, 3)))
    assert fewest_nodes_even([1, 4, 2], 5) == Placement(((1, 3), (2, 2)))
    assert fewest_nodes_even([1, 1], 3) is None


@pytest.mark.parametrize("seed", range(6))
def test_even_placer_places_exactly_as_fewest_nodes_even(seed) -> None:
    """Many jobs placed one after another on one free list, as gang_allocate does."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice([2, 4, 8], size=int(rng.integers(5, 60))).tolist()
    free = [int(rng.integers(0, g + 1)) for g in sizes]
    mirror = list(free)
    placer = EvenPlacer()
    for _ in range(200):
        k = int(rng.choice([1, 2, 3, 4, 5, 8, 12, 16, 33]))
        want = fewest_nodes_even(mirror, k)
        got = placer(free, k)
        assert got == want, (seed, k, mirror)
        if got is not None:
            take(free, got)
            take(mirror, got)
        if rng.random() < 0.05:  # a new round: another free list
            free = [int(rng.integers(0, g + 1)) for g in sizes]
            mirror = list(free)
        if rng.random() < 0.05:  # changed behind its back: it notices by the total
            node = int(rng.integers(0, len(free)))
            free[node] = mirror[node] = max(0, free[node] - 1)
            if placer._total == sum(free):
                placer = EvenPlacer()


# -- the policies on hand-made snapshots -------------------------------------------------------


def spec(name: str, gpus: int = 4, batch: int = 256, app: str = "cifar10") -> JobSpec:
    return JobSpec(name=name, submit_time_s=0.0, app=app, gpus=gpus, batch_size=batch,
                   init_bsz=64, max_bsz=4096, min_local_bsz=16, max_local_bsz=256,
                   adaptive=False)


def estimator_with(points: list[tuple[int, int, int, float, float]]) -> JobEstimator:
    est = JobEstimator(64, 4096, 16, 256, adaptive=False)
    for n, k, m, step_s, sync_s in points:
        est.observe_step(n, k, m, step_s, sync_s, count=10)
    return est


def view(s: JobSpec, est: JobEstimator | None, *, remaining: float = 0.0,
         metrics: tuple = (), steps: int = 0) -> JobView:
    return JobView(spec=s, status=JobStatus.PENDING, assignment=None, attained_gpu_s=0.0,
                   run_time_s=0.0, queue_time_s=0.0, restarts=0, epoch=len(metrics), steps=steps,
                   progress=0.0, max_gpus_held=0, first_start_s=None, last_change_s=None,
                   batch=None, estimator=est, metrics=metrics,
                   oracle=OracleInfo(remaining, remaining))


# Step times of a job that scales well within a node: 256 samples on k GPUs.
SCALES = [(1, 1, 256, 1.00, 0.0), (1, 2, 128, 0.55, 0.05), (1, 4, 64, 0.32, 0.07)]


TWO_NODES = Cluster.uniform(2, 4)


def snap(views: list[JobView], cluster: Cluster = TWO_NODES) -> Snapshot:
    return Snapshot(time_s=600.0, cluster=cluster, jobs=tuple(views), previous=Decision({}))


def test_oracle_gives_spare_gpus_to_the_longer_job() -> None:
    long, short = view(spec("long"), estimator_with(SCALES), remaining=10_000), \
        view(spec("short"), estimator_with(SCALES), remaining=100)
    d = create_policy("optimus-oracle", {"speed_model": "allreduce", "explore_factor": "0"}
                      ).decide(snap([short, long]))
    assert d.get("long").num_gpus > d.get("short").num_gpus >= 1
    assert d.get("long").batch == spec("long").user_batch(d.get("long").num_gpus)  # TunedJobs
    used = sum(a.num_gpus for a in d.assignments.values())
    assert used <= 8


def test_exploration_caps_growth_and_unrun_jobs_get_one_gpu() -> None:
    one = view(spec("one"), estimator_with(SCALES[:1]), remaining=1e6)
    fresh = view(spec("fresh"), estimator_with([]), remaining=1e6)
    d = create_policy("optimus-oracle", {"speed_model": "allreduce"}).decide(snap([one, fresh]))
    assert d.get("one").num_gpus == 2  # 2 x the most GPUs it has run on
    assert d.get("fresh").num_gpus == 1  # no model yet: starvation-avoidance GPU only


def test_ps_speed_model_is_used_once_three_gpu_counts_were_run() -> None:
    pol = create_policy("optimus-oracle", {"speed_model": "ps", "explore_factor": "0"})
    v = view(spec("j"), estimator_with(SCALES), remaining=10_000)
    table = pol.step_times(v, 8, 4)
    assert table is not None and table[1] == pytest.approx(1.0, rel=0.05)
    assert np.all(np.diff(table[1:5]) < 0)
    with pytest.raises(UnknownPolicyError, match="speed_model"):
        create_policy("optimus", {"speed_model": "magic"})


def test_oracle_speed_model_reads_true_step_times_and_explores_nothing() -> None:
    """optimus-oracle (default speed_model=oracle) grows a job that never ran straight to the
    count the true step times favour, as the Pollux artifact's Optimus+Oracle did."""
    s = spec("j", batch=1024)
    true_step = (4.0, 2.0, 1.4, 1.0, 0.9, 0.85, 0.84, 0.9)  # 1..8 GPUs
    v = view(s, estimator_with([]), remaining=1e5)
    v.oracle = OracleInfo(1e5, 1e5, step_s_user=true_step)
    d = create_policy("optimus-oracle").decide(snap([v]))
    assert d.get("j").num_gpus == 7  # gains positive up to 7, negative at 8
    v.oracle = OracleInfo(1e5, 1e5)  # no table: a clear error, not a silent guess
    with pytest.raises(RuntimeError, match="step_s_user"):
        create_policy("optimus-oracle").decide(snap([v]))
    with pytest.raises(UnknownPolicyError, match="oracle"):
        create_policy("optimus", {"speed_model": "oracle"})


def test_online_remaining_steps_follow_the_convergence_fit() -> None:
    pol = create_policy("optimus")
    delta = USER_DELTA["cifar10"]
    curve = LossCurve.from_betas(0.2, 0.6, 0.05)
    values = [float(-curve(k)) for k in range(1, 21)]  # an accuracy-like rising metric
    metrics = tuple((50 * e, e, m) for e, m in enumerate(values, start=1))
    v = view(spec("j"), estimator_with(SCALES), metrics=metrics, steps=1000)
    pred = predict_total_epochs(values, delta, delta_prime=3 * delta)
    expect = pred.remaining(20) * 50 * (1.05 if pred.before_prime(20) else 1.0)
    assert pol.remaining_steps(v, snap([v])) == pytest.approx(expect)
    # Before its first epoch a job borrows steps/epoch from another job of the same model.
    fresh = view(spec("fresh", batch=512), None)
    assert steps_per_epoch(fresh, snap([v, fresh])) == pytest.approx(25)


def test_steps_per_epoch_borrows_from_the_first_job_of_the_app_once_per_round() -> None:
    first = view(spec("a", batch=256), None, metrics=((100, 2, 0.5),))
    second = view(spec("b", batch=128), None, metrics=((90, 1, 0.5),))
    other_app = view(spec("c", app="bert"), None, metrics=((7, 1, 0.5),))
    fresh = view(spec("fresh", batch=512), None, steps=3)
    s = snap([other_app, first, second, fresh])
    assert borrowed_epoch_steps(s, "cifar10") == (50.0, 256)
    assert steps_per_epoch(fresh, s) == 25.0
    lonely = view(spec("lonely", app="ncf"), None, steps=3)
    assert borrowed_epoch_steps(s, "ncf") is None and steps_per_epoch(lonely, s) == 3.0
    pol = create_policy("optimus")
    looked_up: list[str] = []

    def counting(snapshot: Snapshot, app: str):
        looked_up.append(app)
        return borrowed_epoch_steps(snapshot, app)
    pol._epoch_steps = None
    for v in (fresh, lonely, fresh, lonely):
        pol._borrow(s, v.spec.app)
    assert pol._epoch_steps[1] == {"cifar10": (50.0, 256), "ncf": None}
    assert steps_per_epoch(fresh, s, counting) == steps_per_epoch(fresh, s, pol._borrow) == 25.0
    pol.decide(s)
    assert pol._epoch_steps is None  # the round's table does not outlive its snapshot


def test_bad_parameters() -> None:
    with pytest.raises(UnknownPolicyError, match="delta_by_app"):
        create_policy("optimus", {"delta_by_app": "cifar10"})
    assert create_policy("optimus", {"delta_by_app": "x=0.1"}).params.deltas()["x"] == 0.1


def test_model_step_times_are_shared_by_equal_inputs_and_equal_a_fresh_table() -> None:
    import dataclasses

    from corral.perf.throughput import iteration_time
    from corral.policies.optimus import ModelStepTimes

    params = estimator_with(SCALES).throughput_params()
    tables = ModelStepTimes(capacity=3)
    a, b = spec("a"), spec("b")
    got = tables.get(params, a, 6, 4)
    ks = np.arange(1, 7)
    batches = [a.user_batch(int(k)) for k in ks]
    fresh = iteration_time(params, np.ceil(ks / 4), ks, np.array([x.local_bsz for x in batches]),
                           np.array([x.accum_steps for x in batches]))
    assert np.array_equal(got, np.concatenate(([INF], fresh)))  # bit for bit
    assert tables.get(dataclasses.replace(params), b, 6, 4) is got  # equal model, same batch
    assert not got.flags.writeable  # shared: nobody may change it
    other = dataclasses.replace(a, batch_size=a.batch_size * 2)  # another user batch
    assert tables.get(params, other, 6, 4) is not got
    assert tables.get(params, a, 6, 2) is not got  # smaller nodes: other node counts
    assert tables.get(params, a, 5, 4) is not got
    assert tables.get(params, a, 6, 4) is not got  # evicted: capacity 3, least recently used
