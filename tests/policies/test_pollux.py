"""Pollux: fitness and penalty by hand, repair invariants, exploration cap, warm start,
parameters, the fairness knob toward max-min, and an end-to-end win over fifo."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from corral.core import Cluster, JobSpec
from corral.core.cluster import Placement
from corral.core.errors import UnknownPolicyError
from corral.core.jobs import Assignment, Decision, JobStatus, JobView, Snapshot
from corral.perf.estimator import JobEstimator
from corral.policies import create_policy
from corral.policies.pollux.policy import (
    PolluxParams,
    max_gpus_for,
    realloc_factor,
    search_patience,
    search_population,
)
from corral.policies.pollux.search import (
    SPEEDUP_EPS,
    AllocationProblem,
    SearchSettings,
    SpeedupTable,
    _Searcher,
    fitness,
    genetic_search,
    power_mean,
    remap_population,
)
from corral.policies.slot_columns import count_true
from corral.sim.analysis.metrics import summarize
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import synthetic

# --------------------------------------------------------------------- fitness and penalty


def test_power_mean_by_hand():
    v = np.array([1.0, 3.0])
    a, b = 1.0 + SPEEDUP_EPS, 3.0 + SPEEDUP_EPS
    assert power_mean(v, 1) == pytest.approx((a + b) / 2)
    assert power_mean(v, -1) == pytest.approx(2 / (1 / a + 1 / b))
    assert power_mean(v, 2) == pytest.approx(((a * a + b * b) / 2) ** 0.5)
    assert power_mean(v, 0) == pytest.approx(3 ** 0.5)  # geometric of max(v, eps)
    # a job without GPUs counts as eps: with p = -1 it dominates the harmonic mean
    assert power_mean(np.array([0.0, 4.0]), -1) == pytest.approx(
        2 / (1 / SPEEDUP_EPS + 1 / (4 + SPEEDUP_EPS)))
    # rows are individuals
    np.testing.assert_allclose(power_mean(np.array([[1.0, 3.0], [2.0, 2.0]]), 1),
                               [2 + SPEEDUP_EPS, 2 + SPEEDUP_EPS])


def test_fitness_applies_penalty_only_to_changed_jobs():
    speedups = np.array([[2.0, 4.0]])
    penalty = np.array([0.5, 0.25])
    got = fitness(speedups, np.array([[True, False]]), penalty, 1.0)
    assert got[0] == pytest.approx((1.0 + 4.0) / 2 + SPEEDUP_EPS)


def test_realloc_factor_by_hand():
    assert realloc_factor(300, 2, 30) == pytest.approx((300 - 60) / 330)
    assert realloc_factor(60, 0, 30) == pytest.approx(60 / 90)  # starting a pending job
    assert realloc_factor(50, 3, 30) == 0.0  # floored at 0
    assert realloc_factor(50, 3, 0) == 1.0  # restarts cost nothing


# ------------------------------------------------------------------------------ search

def _problem(node_gpus, max_gpus, tables=None, base=None, penalty=None, p=-1.0, min_gpus=None):
    J = len(max_gpus)
    N = len(node_gpus)
    if tables is None:  # linear speedups with a mild cross-node discount
        tables = []
        for cap in max_gpus:
            t = np.tile(np.arange(cap + 1, dtype=float), (min(16, N, cap) + 1, 1))
            t[2:] *= 0.8
            t[0] = 0
            tables.append(t)
    return AllocationProblem(
        node_gpus=np.array(node_gpus), base=np.zeros((J, N), dtype=np.int64) if base is None
        else np.array(base), max_gpus=np.array(max_gpus),
        min_gpus=np.ones(J, dtype=np.int64) if min_gpus is None else np.array(min_gpus),
        speedup=SpeedupTable(tables), penalty=np.ones(J) if penalty is None else np.array(penalty),
        p=p)


def _random_population(s: _Searcher, rng, size=60) -> np.ndarray:
    """Valid-capacity slot arrays (C, P, nodes) with random jobs (drawn unsorted, then sorted)."""
    S = rng.integers(0, s.J + 1, size=(s.C, size, s.num_nodes))
    S = np.where(s.blocked[:, None, :], s.block, S)
    return np.sort(S, axis=0).astype(s.dtype)


def _dense(s: _Searcher, S: np.ndarray) -> np.ndarray:
    return np.stack([s.decode(S[:, i]) for i in range(S.shape[1])])


def _blocked_ok(s: _Searcher, S: np.ndarray) -> bool:
    """Every position beyond a node's size holds BLOCK, and only those."""
    return bool(np.all((S == s.block) == s.blocked[:, None, :]))


def test_repair_enforces_interference_caps_and_capacity():
    rng = np.random.default_rng(1)
    pb = _problem([4, 4, 2, 4, 3, 4], max_gpus=[1, 2, 3, 6, 8, 12, 5, 4], min_gpus=[1] * 6 + [3, 1])
    s = _Searcher(pb, SearchSettings(max_nodes_per_job=3), rng)
    repaired = s.repair(_random_population(s, rng, 200))
    A = _dense(s, repaired)  # (P, J, nodes)
    assert np.all(A.sum(axis=1) <= pb.node_gpus)  # node capacity
    K = A.sum(axis=2)
    assert np.all(K <= pb.max_gpus)  # per-job cap
    assert np.all((K == 0) | (K >= pb.min_gpus))  # minimum GPUs
    spans = (A > 0).sum(axis=2)
    assert np.all(spans <= 3)  # max nodes per job
    distributed = spans > 1  # (P, J)
    per_node = ((A > 0) & distributed[:, :, None]).sum(axis=1)
    assert np.all(per_node <= 1)  # at most one distributed job per node
    # repaired slots stay canonical: sorted per node, blocked positions blocked
    assert np.array_equal(repaired, np.sort(repaired, axis=0))
    assert _blocked_ok(s, repaired)


def test_operators_never_overfill_a_node():
    rng = np.random.default_rng(2)
    pb = _problem([4, 2, 4], max_gpus=[4, 4, 8, 2, 1])
    s = _Searcher(pb, SearchSettings(), rng)
    pop = s.repair(_random_population(s, rng, 100))
    for _ in range(5):
        child = s.crossover(pop[:, :50], pop[:, 50:])
        mutated = s.mutate(child)
        for S in (child, mutated):
            assert np.all(_dense(s, S).sum(axis=1) <= pb.node_gpus)
            assert _blocked_ok(s, S)
            assert np.array_equal(S, np.sort(S, axis=0))
        pop = s.repair(mutated)


def test_growth_mutation_grows_jobs_where_they_are():
    # Job 0 holds 1 of node 0's 4 GPUs; 7 other nodes are idle. As in the artifact it asks to
    # grow on node 0, its only node with free GPUs, w.p. 1 (and on each node w.p. 1/8), to a
    # uniform 1..4 GPUs there: 3 in 4 offspring grow it in place. (A node taking one random
    # slot's job, as before issue 15, grew it in about 1 in 6.)
    base = np.zeros((2, 8), dtype=np.int64)
    base[0, 0] = 1
    pb = _problem([4] * 8, max_gpus=[32, 32], base=base)
    s = _Searcher(pb, SearchSettings(reset_prob=0.0, zero_row_prob=0.0), np.random.default_rng(4))
    pop = np.repeat(s.base_slots[:, None, :], 4000, axis=1)
    grown = _dense(s, s.mutate(pop))[:, 0, 0] > 1
    assert 0.7 < grown.mean() < 0.8


def test_growth_in_place_splits_a_node_in_priority_order():
    # Jobs 0 and 1 hold one GPU each of node 0 (4 GPUs), their only node with free GPUs; 7
    # nodes are idle. Both ask to grow on node 0 every time, each to a uniform 1..4 GPUs there;
    # node capacity then goes in priority order, as the artifact's repair: job 0 gets its
    # request, job 1 what is left of its own (nothing when job 0 took all 4).
    base = np.zeros((2, 8), dtype=np.int64)
    base[:, 0] = 1
    pb = _problem([4] * 8, max_gpus=[32, 32], base=base)
    s = _Searcher(pb, SearchSettings(reset_prob=0.0, zero_row_prob=0.0), np.random.default_rng(5))
    A = _dense(s, s.mutate(np.repeat(s.base_slots[:, None, :], 8000, axis=1)))[:, :, 0]
    share = np.bincount(A[:, 0], minlength=5)[1:] / len(A)
    assert np.all(np.abs(share - 0.25) < 0.03)
    assert np.all(A.sum(axis=1) <= 4)
    assert np.array_equal(A[:, 1] == 0, A[:, 0] == 4)
    assert 0.1 < np.mean(A[:, 1] > 1) < 0.5


def test_growth_in_place_same_on_all_cells_or_the_free_ones():
    # Gathering the cells with free GPUs is only a speed choice: same draws, same result.
    rng = np.random.default_rng(6)
    pb = _problem([4, 4, 2, 4, 3, 4, 1, 4], max_gpus=[1, 2, 3, 6, 8, 12, 5, 4])
    s = _Searcher(pb, SearchSettings(), rng)
    M = s.repair(_random_population(s, rng, 300))
    for p_free in (0.2, 0.9):
        has_free = (count_true(M < s.J) < s.caps) & (rng.random(M.shape[1:]) < p_free)
        drawn = [np.where(rng.random(M.shape[1:]) < 0.3, 1, s.free).astype(s.dtype)]
        outs = []
        for dense in (True, False):
            s.rng = np.random.default_rng(7)
            outs.append(s._growth_in_place(M.copy(), has_free, drawn, dense=dense))
        assert np.array_equal(outs[0], outs[1])
        assert not np.array_equal(outs[0], M)  # something grew


def test_interference_avoidance_switch():
    # 2 nodes x 2 GPUs, two jobs that (oddly) run best spread over both nodes: without
    # avoidance both spread and share both nodes; with it, no node hosts two distributed jobs.
    table = np.array([[0, 0, 0], [0, 1.0, 1.0], [0, 0, 3.0]])  # [N, K]
    pb = _problem([2, 2], [2, 2], tables=[table, table], p=1.0)
    for avoid in (True, False):
        st = SearchSettings(generations=40, avoid_interference=avoid)
        A = genetic_search(pb, st, np.random.default_rng(0)).allocation
        dist = (A > 0).sum(axis=1) > 1
        shared = ((A > 0) & dist[:, None]).sum(axis=0)
        if avoid:
            assert np.all(shared <= 1)
        else:
            assert np.array_equal(A, [[1, 1], [1, 1]])


def test_reallocation_penalty_keeps_a_job_where_it_is():
    # One 4-GPU node, one job on 2 GPUs; 4 GPUs would be 30% faster.
    table = np.array([[0, 0, 0, 0, 0], [0, 1.0, 2.0, 2.3, 2.6]])
    for penalty, expected in ((0.5, 2), (1.0, 4)):  # 2.6 * 0.5 < 2.0 < 2.6
        pb = _problem([4], [4], tables=[table], base=[[2]], penalty=[penalty], p=-1.0)
        A = genetic_search(pb, SearchSettings(generations=20), np.random.default_rng(0)).allocation
        assert A[0, 0] == expected


@pytest.mark.parametrize("p", [-1.0, 0.0, 1.0, 2.0, 0.5, -3.5])
def test_evaluate_equals_fitness_of_the_allocations_bit_for_bit(p):
    # the search evaluates by table lookup (`_fitness_terms`); it must give `fitness` of each
    # allocation's speedups exactly, since comparisons of fitness decide the search
    rng = np.random.default_rng(3)
    caps = rng.choice([1, 2, 4, 8], size=12)
    tables = []
    for cap in caps:
        gains = np.concatenate([[0.0], np.cumsum(rng.uniform(0.1, 1.0, cap))])
        tables.append(np.vstack([np.zeros(cap + 1)] + [gains * 0.8 ** n
                                                      for n in range(min(5, cap))]))
    base = np.zeros((12, 5), dtype=np.int64)
    base[[0, 3, 7], [1, 2, 4]] = 1
    pb = _problem([4, 4, 8, 2, 4], caps, tables=tables, base=base,
                  penalty=rng.uniform(0.1, 1.0, 12), p=p)
    s = _Searcher(pb, SearchSettings(), rng)
    S = s.repair(_random_population(s, rng, 80))
    A = _dense(s, S)  # (P, J, nodes)
    K, N = A.sum(axis=2), (A > 0).sum(axis=2)
    changed = np.any(A != pb.base[None], axis=2)
    expected = fitness(pb.speedup.lookup(N, K), changed, pb.penalty, p)
    assert np.array_equal(s.evaluate(S), expected)


def test_encode_decode_round_trip_and_truncation():
    pb = _problem([4, 2], max_gpus=[4, 4, 4])
    s = _Searcher(pb, SearchSettings(), np.random.default_rng(0))
    alloc = np.array([[1, 0], [2, 1], [0, 1]])
    assert np.array_equal(s.decode(s.encode(alloc)), alloc)
    # more than a node holds: jobs later in the order lose the excess
    over = np.array([[3, 0], [2, 0], [0, 2]])
    assert np.array_equal(s.decode(s.encode(over)), [[3, 0], [1, 0], [0, 2]])


def test_remap_population_reindexes_and_frees_departed_jobs():
    # 3 old jobs (FREE = 3, BLOCK = 4); job 1 left, old 0 -> new 1, old 2 -> new 0; 2 new jobs
    slots = np.array([[[0, 1, 2, 3], [2, 2, 3, 4]]])
    out = remap_population(slots, np.array([1, -1, 0]), 2)  # FREE = 2, BLOCK = 3
    assert out.tolist() == [[[0, 1, 2, 2], [0, 0, 2, 3]]]


def test_very_negative_p_approaches_max_min():
    # One 8-GPU node, two jobs: A scales linearly, B saturates.
    a = np.arange(9, dtype=float)
    b = np.array([0, 1, 1.8, 2.4, 2.9, 3.3, 3.6, 3.8, 3.9])
    tables = [np.vstack([np.zeros(9), a]), np.vstack([np.zeros(9), b])]

    def best_k(p: float) -> int:
        pb = _problem([8], [8, 8], tables=tables, p=p)
        A = genetic_search(pb, SearchSettings(generations=60), np.random.default_rng(0)).allocation
        return int(A[0, 0])

    # exhaustive max-min: A gets k, B gets 8 - k
    maxmin = max(range(1, 8), key=lambda k: min(a[k], b[8 - k]))
    assert maxmin == 3
    assert best_k(-50.0) == maxmin
    assert best_k(1.0) >= 6  # the mean favours the job that scales


def test_search_matches_exhaustive_optimum_on_a_small_problem():
    rng = np.random.default_rng(5)
    caps = [3, 4, 2]
    tables = []
    for cap in caps:
        gains = np.concatenate([[0], np.cumsum(rng.uniform(0.2, 1.0, cap))])
        t = np.vstack([np.zeros(cap + 1), gains, gains * 0.7])[: min(2, cap) + 1]
        tables.append(t)
    pb = _problem([2, 2], caps, tables=tables, p=-1.0)
    s = _Searcher(pb, SearchSettings(), rng)
    best = -np.inf
    for flat in itertools.product(range(3), repeat=6):
        A = np.array(flat).reshape(3, 2)
        if np.any(A.sum(axis=0) > 2) or np.any(A.sum(axis=1) > caps):
            continue
        dist = (A > 0).sum(axis=1) > 1
        if np.any(((A > 0) & dist[:, None]).sum(axis=0) > 1):
            continue
        best = max(best, float(s.evaluate(s.encode(A)[:, None])[0]))
    got = genetic_search(pb, SearchSettings(generations=50), np.random.default_rng(0))
    assert got.fitness == pytest.approx(best)


def test_jobs_sharing_a_goodput_function_get_the_same_bits_as_computed_alone():
    from corral.perf.efficiency import GradStats
    from corral.perf.goodput import GoodputFunction, best_goodputs, optimize_many
    from corral.perf.throughput import ThroughputParams

    models = [ThroughputParams(0.02, 0.0007, 0.03, 0.002, 0.12, 0.003, 2.0),
              ThroughputParams(0.1, 0.002, 0.01, 0.001, 0.3, 0.01, 1.3)]
    # 30 jobs, 6 distinct functions: equal inputs in distinct objects, as jobs of one app have
    fns = [GoodputFunction(models[i % 2], GradStats(1.0 + i % 3, 30.0), 128, 4096, 32, 1024)
           for i in range(30)]
    rng = np.random.default_rng(0)
    gpus = rng.integers(1, 40, size=3000)
    nodes = np.minimum(rng.integers(1, 9, size=3000), gpus)
    which = rng.integers(0, len(fns), size=3000)
    assert np.array_equal(best_goodputs(fns, which, nodes, gpus),
                          optimize_many(fns, which, nodes, gpus)[0])


def test_speedup_tables_equal_every_cell_computed_on_its_own():
    """Rows N >= 3 share row 2's values (the model tells only one node from several) and
    candidates are remembered: the tables are still each cell's own computation, bit for bit."""
    from corral.perf.efficiency import GradStats
    from corral.perf.goodput import GoodputFunction, _best, _column_candidates
    from corral.perf.throughput import ThroughputParams
    from corral.policies.pollux.speedup import SpeedupGrids

    params = ThroughputParams(0.02, 0.0007, 0.03, 0.002, 0.12, 0.003, 1.7)
    grids = SpeedupGrids()
    for sqr in (1.0, 2.5):  # the second round: new statistics, the same model
        fn = GoodputFunction(params, GradStats(sqr, 30.0), 128, 8192, 16, 512)
        for max_nodes, max_gpus in ((4, 12), (8, 24)):  # the grid grows in both directions
            (table,) = grids.tables([("j", fn, max_nodes, max_gpus)], 1, 4)
            n, k = np.meshgrid(np.arange(max_nodes + 1), np.arange(max(max_gpus, 4) + 1),
                               indexing="ij")
            n, k = n.ravel(), k.ravel()
            best = _best(_column_candidates([fn], np.zeros(n.size, dtype=np.int64),
                                            n.astype(float), k.astype(float)),
                         GradStats(sqr=np.full((n.size, 1), sqr), var=np.full((n.size, 1), 30.0)),
                         np.full((n.size, 1), 128.0))[0]
            values = np.where((n <= k) & (n > 0), best, 0.0).reshape(max_nodes + 1, -1)
            want = values[:, :max_gpus + 1] / values[1, 4]
            assert table.tobytes() == want.tobytes(), (sqr, max_nodes)


# ------------------------------------------------------------------------ the policy

def _spec(name: str, t: float = 0.0, max_bsz: int = 4096, adaptive: bool = True) -> JobSpec:
    return JobSpec(name=name, submit_time_s=t, app="cifar10", gpus=1, batch_size=128,
                   init_bsz=128, max_bsz=max_bsz, min_local_bsz=32, max_local_bsz=1024,
                   adaptive=adaptive)


def _view(spec: JobSpec, placement: Placement | None = None, estimator=None, attained=0.0,
          restarts=0) -> JobView:
    running = bool(placement)
    return JobView(spec=spec, status=JobStatus.RUNNING if running else JobStatus.PENDING,
                   assignment=Assignment(placement) if running else None,
                   attained_gpu_s=attained, run_time_s=0.0, queue_time_s=0.0, restarts=restarts,
                   epoch=0, steps=0, progress=0.0,
                   max_gpus_held=placement.num_gpus if running else 0, first_start_s=None,
                   last_change_s=None, batch=None, estimator=estimator)


def _estimator(observed: dict[tuple[int, int], float]) -> JobEstimator:
    """A cifar10-like job that ran the given (nodes, GPUs) at m = 128 with near-linear scaling."""
    est = JobEstimator(128, 4096, 32, 1024)
    for (n, k), sync in observed.items():
        step = 0.1 + sync
        est.observe_step(n, k, 128, step, sync)
    est.observe_grad(1.0, 50.0)
    return est


def _snapshot(views, cluster="4x4", t=600.0) -> Snapshot:
    return Snapshot(time_s=t, cluster=Cluster.parse(cluster), jobs=tuple(views),
                    previous=Decision({}))


def test_parameters_settable_by_name():
    pol = create_policy("pollux", {"p": "-10", "restart_penalty_s": "15", "population": "20",
                                   "generations": "7", "interference_avoidance": "false",
                                   "patience": "0", "seed": "3"})
    assert pol.params == PolluxParams(p=-10.0, restart_penalty_s=15.0, population=20,
                                      generations=7, patience=0, interference_avoidance=False,
                                      seed=3)
    with pytest.raises(UnknownPolicyError):
        create_policy("pollux", {"population": "1"})
    with pytest.raises(UnknownPolicyError):
        create_policy("pollux", {"nope": "1"})


def test_exploration_cap_is_twice_the_most_gpus_run():
    total = 64
    assert max_gpus_for(_view(_spec("new")), total) == 1
    assert max_gpus_for(_view(_spec("a"), estimator=_estimator({(1, 1): 0.0, (1, 3): 0.01})),
                        total) == 6
    # never below what it holds now, never above batch limits or the cluster
    held = _view(_spec("b"), placement=Placement.of({0: 4, 1: 4}),
                 estimator=_estimator({(1, 1): 0.0}))
    assert max_gpus_for(held, total) == 8
    assert max_gpus_for(_view(_spec("c", max_bsz=256), estimator=_estimator({(1, 4): 0.01})),
                        total) == 256 // 32
    assert max_gpus_for(_view(_spec("d"), estimator=_estimator({(4, 16): 0.02})), 8) == 8
    gang = JobSpec(name="g", submit_time_s=0, app="cifar10", gpus=4, batch_size=512, init_bsz=128,
                   max_bsz=4096, min_local_bsz=32, max_local_bsz=1024, min_gpus=4)
    assert max_gpus_for(_view(gang), total) == 4  # a new job needing 4 GPUs can start


def test_policy_respects_exploration_cap_and_starts_new_jobs_on_one_gpu():
    views = [_view(_spec("new")),
             _view(_spec("explored"), estimator=_estimator({(1, 1): 0.0, (1, 2): 0.002}))]
    decision = create_policy("pollux").decide(_snapshot(views))
    assert decision.get("new").num_gpus == 1
    assert 1 <= decision.get("explored").num_gpus <= 4


def test_policy_warm_starts_from_its_last_population():
    pol = create_policy("pollux", {"generations": "3"})
    views = [_view(_spec(f"j{i}"), estimator=_estimator({(1, 1): 0.0, (1, 2): 0.002}))
             for i in range(3)]
    pol.decide(_snapshot(views))
    names, nodes, population = pol._last
    assert len(population) > 1 and set(names) == {"j0", "j1", "j2"}
    # one job leaves, one arrives: its old GPUs are freed in the seeds, the newcomer has none
    views2 = [views[0], views[2], _view(_spec("j3"))]
    seeds = pol._warm_start(tuple(v.name for v in views2), np.array(nodes))
    assert seeds.shape == population.shape
    # new indices: j0 -> 0, j2 -> 1, j3 -> 2 (holds nothing); FREE = 3, BLOCK = 4
    assert set(np.unique(seeds).tolist()) <= {0, 1, 3, 4}
    assert np.count_nonzero(seeds < 3) == np.count_nonzero(
        (population == names.index("j0")) | (population == names.index("j2")))
    # a changed cluster drops the warm start
    assert pol._warm_start(tuple(v.name for v in views2), np.array([4, 4])) is None


def test_search_patience_grows_with_the_time_since_the_last_search():
    assert search_patience(5, 60.0, 60.0) == 5
    assert search_patience(5, 30.0, 60.0) == 5  # never below patience
    assert search_patience(5, 240.0, 60.0) == 20
    assert search_patience(5, 480.0, 60.0) == 40
    assert search_patience(5, 90.0, 60.0) == 8  # 7.5, rounded up
    assert search_patience(5, None, 60.0) == 5  # first search
    assert search_patience(5, 480.0, 0.0) == 5  # per search
    assert search_patience(0, 480.0, 60.0) == 0  # never stops early


def _searched_generations(period_s: str, gap_s: float, names=("j0", "j1", "j2")) -> int:
    """Generations of the second of two searches `gap_s` apart (the second of other jobs when
    `names` does not overlap the first's)."""
    pol = create_policy("pollux", {"patience": "2", "patience_period_s": period_s})
    est = _estimator({(1, 1): 0.0, (1, 2): 0.002})
    pol.decide(_snapshot([_view(_spec(n), estimator=est) for n in ("j0", "j1", "j2")], t=600.0))
    pol.decide(_snapshot([_view(_spec(n), estimator=est) for n in names], t=600.0 + gap_s))
    return pol.last_generations


def test_a_later_search_runs_longer_unless_patience_is_per_search():
    # patience 2 per 60 s: a search 8 minutes after the last waits 16 generations for a better
    # allocation; per search, or for jobs the last search never saw, it waits 2
    assert _searched_generations("60", 480.0) >= 16
    assert _searched_generations("0", 480.0) < 16
    assert _searched_generations("60", 480.0, names=("k0", "k1", "k2")) < 16


def test_decision_keeps_unchanged_placements_and_fits_the_cluster():
    views = [_view(_spec(f"j{i}"), placement=Placement.of({i: 2}),
                   estimator=_estimator({(1, 1): 0.0, (1, 2): 0.002}), restarts=0)
             for i in range(4)]
    decision = create_policy("pollux").decide(_snapshot(views, t=120.0))
    used = decision.used_gpus(4)
    assert all(u <= 4 for u in used)
    assert all(decision.get(v.name) is not None for v in views)


def test_pollux_beats_fifo_on_a_small_workload():
    truth = CatalogTruth()
    apps = truth.limits()
    workload = synthetic(apps, num_jobs=14, rate_per_hour=40, seed=4,
                         mix={"cifar10": 0.6, "deepspeech2": 0.2, "bert": 0.2},
                         gpus_choices={"cifar10": [1, 2, 4], "deepspeech2": [2, 4], "bert": [4]})
    config = EngineConfig(max_time_s=4 * 86400)
    avg = {}
    for name in ("fifo", "pollux"):
        result = Simulator(truth, create_policy(name), Cluster.parse("2x4"), config).run(workload)
        s = summarize(result)
        assert s.unfinished == 0
        avg[name] = s.avg_jct_s
    assert avg["pollux"] < avg["fifo"]


def test_a_job_that_never_reports_gets_its_requested_gpus():
    import dataclasses

    spec = dataclasses.replace(_spec("plain", adaptive=False), gpus=4)
    empty = JobEstimator(spec.init_bsz, spec.max_bsz, spec.min_local_bsz, spec.max_local_bsz,
                         accumulation=True, adaptive=False)
    young = dataclasses.replace(_view(spec, placement=Placement.of({0: 1}), estimator=empty),
                                run_time_s=60.0)
    silent = dataclasses.replace(young, run_time_s=601.0)  # past the default 600 s
    assert max_gpus_for(young, 16, 120.0) == 1  # still exploring: it may report yet
    assert max_gpus_for(silent, 16, 120.0) == 4
    restarting = dataclasses.replace(young, run_time_s=300.0)  # in imagenet's 250 s pause, say
    assert create_policy("pollux").decide(_snapshot([restarting])).get("plain").num_gpus == 1
    assert max_gpus_for(silent, 16) == 1  # the rule is off by default in the helper
    alone = create_policy("pollux").decide(_snapshot([silent]))
    assert alone.get("plain").num_gpus == 4
    reporting = dataclasses.replace(silent, estimator=_estimator({(1, 1): 0.0}))
    assert max_gpus_for(reporting, 16, 120.0) == 2  # a job with a model explores as before


def test_search_population_follows_the_jobs_on_large_clusters_only():
    # up to 64 nodes: the artifact's population, whatever the jobs (the stored references)
    assert search_population(100, 3, 16, 32) == 100
    assert search_population(100, 3, 64, 32) == 100
    # above: two per job, between 16 and large_population (and never above population)
    assert search_population(100, 3, 65, 32) == 16
    assert search_population(100, 12, 512, 32) == 24
    assert search_population(100, 300, 512, 32) == 32
    assert search_population(20, 300, 512, 32) == 20
    assert search_population(100, 3, 512, 8) == 8
    assert search_population(100, 300, 512, 0) == 100  # off: the artifact's search
    with pytest.raises(ValueError):
        PolluxParams(large_population=1)


def test_a_large_cluster_searches_the_smaller_population():
    views = [_view(_spec(f"j{i}"), estimator=_estimator({(1, 1): 0.0, (1, 2): 0.002}))
             for i in range(3)]
    # growth off: with it, these waiting jobs start at their best without a search (settled)
    big = create_policy("pollux", {"grow_idle_gpus": "false"})
    whole = create_policy("pollux", {"large_population": "0", "grow_idle_gpus": "false"})
    big.decide(_snapshot(views, cluster="100x4"))
    whole.decide(_snapshot(views, cluster="100x4"))
    assert 1 < len(big._last[2]) <= 16 < len(whole._last[2]) <= 100
