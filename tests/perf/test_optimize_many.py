"""`optimize_many` (many jobs' Eq. 13 in one pass) and warm-started throughput fits."""

from __future__ import annotations

import numpy as np
import pytest

from corral.perf.efficiency import NO_STATS, GradStats
from corral.perf.goodput import GoodputFunction, optimize_many
from corral.perf.throughput import ThroughputParams, fit_throughput, iteration_time

PARAMS = ThroughputParams(alpha_grad=0.02, beta_grad=0.0007, alpha_local=0.03,
                          beta_local=0.002, alpha_node=0.12, beta_node=0.003, gamma=2.0)


def _fns() -> list[GoodputFunction]:
    other = ThroughputParams(0.1, 0.002, 0.01, 0.001, 0.3, 0.01, 1.3)
    return [
        GoodputFunction(PARAMS, GradStats(1.0, 30.0), 128, 4096, 32, 1024, True),
        GoodputFunction(other, GradStats(2.0, 5.0), 12, 384, 4, 12, True),
        GoodputFunction(PARAMS, NO_STATS, 256, 256, 32, 256, False),  # fixed batch
        GoodputFunction(other, GradStats(0.5, 100.0), 20, 640, 10, 80, False),
    ]


def test_optimize_many_equals_each_function():
    fns = _fns()
    rng = np.random.default_rng(0)
    gpus = rng.integers(0, 40, size=200)
    nodes = np.where(gpus > 0, np.minimum(rng.integers(1, 9, size=200), gpus), 0)
    which = rng.integers(0, len(fns), size=200)
    best, local, accum = optimize_many(fns, which, nodes, gpus)
    for i in range(200):
        b, m, s = fns[which[i]].optimize(int(nodes[i]), int(gpus[i]))
        assert best[i] == pytest.approx(b, rel=1e-12, abs=0)
        assert (local[i], accum[i]) == (m, s)


def test_optimize_many_edge_cases():
    assert [a.size for a in optimize_many(_fns(), [], [], [])] == [0, 0, 0]
    with pytest.raises(ValueError):
        optimize_many(_fns(), [0, 1], [1], [1])


def _synthetic(true: ThroughputParams):
    n = np.array([1, 1, 1, 1, 2, 2, 4, 4, 1, 2])
    k = np.array([1, 2, 4, 4, 4, 8, 8, 16, 1, 8])
    m = np.array([32, 64, 32, 128, 64, 32, 128, 64, 128, 128])
    step = np.asarray(iteration_time(true, n, k, m, 0))
    sync = step - (true.alpha_grad + true.beta_grad * m)
    return n, k, m, step, sync


def test_warm_started_fit_reaches_the_cold_fit():
    cold = fit_throughput(*_synthetic(PARAMS), prior_driven=False)
    # start from a perturbed earlier fit, with one parameter at the bound (as if pinned)
    start = ThroughputParams(0.03, 0.001, 1e-8, 0.001, 0.2, 0.004, 1.5)
    warm = fit_throughput(*_synthetic(PARAMS), prior_driven=False, initial=start)
    n, k, m, step, _ = _synthetic(PARAMS)
    for fitted in (cold, warm):
        pred = np.asarray(iteration_time(fitted, n, k, m, 0))
        np.testing.assert_allclose(pred, step, rtol=0.01)
    assert warm.alpha_grad == pytest.approx(cold.alpha_grad, rel=0.02)
    assert warm.beta_grad == pytest.approx(cold.beta_grad, rel=0.02)


def _fresh_many(fns, which, nodes, gpus):
    """Eq. 13 computed afresh for every row as given: no remembered candidates, every node
    count computed as it is (the reference for the caches and the N >= 2 sharing)."""
    from corral.perf import goodput

    idx = np.asarray(which)
    n, k = np.asarray(nodes, dtype=float), np.asarray(gpus, dtype=float)
    stats = np.array([(fn.stats.sqr, fn.stats.var) for fn in fns])[idx]
    init = np.array([float(fn.init_bsz) for fn in fns])[idx, None]
    return goodput._best(goodput._column_candidates(fns, idx, n, k),
                         GradStats(sqr=stats[:, 0:1], var=stats[:, 1:2]), init)


def test_remembered_candidates_give_the_bits_of_a_fresh_computation():
    from corral.perf import goodput
    from corral.perf.candidates import candidate_rows

    goodput._MANY_JOBS.clear()
    goodput._ONE_JOB.clear()
    rng = np.random.default_rng(5)
    gpus = rng.integers(0, 40, size=600)
    nodes = np.where(gpus > 0, np.minimum(rng.integers(1, 12, size=600), gpus), 0)
    which = rng.integers(0, 4, size=600)
    fns = _fns()
    for round_ in range(3):  # cold, remembered, then new gradient statistics on the same models
        if round_ == 2:
            fns = [GoodputFunction(fn.params, GradStats(fn.stats.sqr * 1.7, fn.stats.var * 0.6),
                                   fn.init_bsz, fn.max_bsz, fn.min_local_bsz, fn.max_local_bsz,
                                   fn.accumulation) for fn in fns]
        got = optimize_many(fns, which, nodes, gpus)
        want = _fresh_many(fns, which, nodes, gpus)
        for a, b in zip(got, want):
            assert a.tobytes() == b.tobytes(), round_
        for i in range(0, 600, 7):  # one job's own (scalar) path against its fresh computation
            fn = fns[which[i]]
            fresh = goodput._best(candidate_rows(fn.params, fn.init_bsz, fn.max_bsz,
                                                 fn.min_local_bsz, fn.max_local_bsz,
                                                 fn.accumulation, np.array([float(nodes[i])]),
                                                 np.array([float(gpus[i])])),
                                  fn.stats, fn.init_bsz)
            assert fn.optimize(int(nodes[i]), int(gpus[i])) == (
                float(fresh[0][0]), int(fresh[1][0]), int(fresh[2][0]))
    assert goodput._MANY_JOBS._rows < 600  # N >= 2 rows share one entry per K


def test_candidate_cache_drops_the_least_recently_used_models():
    from corral.perf.candidates import CandidateCache, candidate_rows

    cache = CandidateCache(max_rows=50)
    calls = []

    def compute(n, k):
        calls.append(len(n))
        return candidate_rows(PARAMS, 128, 4096, 32, 1024, True, n, k)

    k = np.arange(1, 21)
    for key in ("a", "b", "a", "c"):
        rows = cache.rows(key, np.ones(20, dtype=np.int64), k, compute)
        assert rows.size == 20
    assert calls == [20, 20, 20]  # "a" again was remembered
    assert cache._rows <= 50 and list(cache._models) == ["a", "c"]  # "b" was dropped
