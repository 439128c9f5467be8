"""Goodput (Eq. 4), the per-allocation batch optimiser (Eq. 13, spec 2.5) and SpeedupFunction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from corral.perf.efficiency import NO_STATS, GradStats
from corral.perf.goodput import GoodputFunction, SpeedupFunction
from corral.perf.throughput import ThroughputParams, iteration_time

PARAMS = ThroughputParams(alpha_grad=0.02, beta_grad=0.0007, alpha_local=0.03,
                          beta_local=0.002, alpha_node=0.12, beta_node=0.003, gamma=2.0)
STATS = GradStats(sqr=1.0, var=30.0)


def make(**kw) -> GoodputFunction:
    args = dict(params=PARAMS, stats=STATS, init_bsz=128, max_bsz=4096, min_local_bsz=32,
                max_local_bsz=1024, accumulation=True)
    args.update(kw)
    return GoodputFunction(**args)


def reference_optimize(fn: GoodputFunction, nodes: int, gpus: int) -> tuple[float, int, int]:
    """Spec 2.5 written out plainly, one candidate at a time (50 geometric candidates)."""
    if gpus == 0:
        return 0.0, 0, 0
    if fn.max_bsz <= fn.init_bsz:  # fixed batch: M0 only
        totals = [float(fn.init_bsz)]
    else:
        lo = max(fn.init_bsz, fn.min_local_bsz * gpus)
        totals = list(np.geomspace(lo, fn.max_bsz, 50))
    best = (0.0, 0, 0)
    for total in totals:
        per_gpu = total / gpus
        s = 0
        if fn.accumulation:
            s = max(math.ceil(per_gpu / fn.max_local_bsz * (1 - 1e-9)) - 1, 0)
            if gpus == 1 and per_gpu > fn.init_bsz:
                s = max(s, 1)
        m = math.ceil(per_gpu / (s + 1) * (1 - 1e-9))
        m = min(m, max(fn.max_bsz, fn.init_bsz) // (gpus * (s + 1)))
        if not fn.min_local_bsz <= m <= fn.max_local_bsz:
            continue
        g = float(fn.goodput(nodes, gpus, m, s))
        if g > best[0]:
            best = (g, m, s)
    return best


# ----------------------------------------------------------------- goodput evaluation


def test_throughput_and_goodput_by_hand():
    fn = make()
    t_iter = iteration_time(PARAMS, 2, 8, 100, 1)
    assert fn.throughput(2, 8, 100, 1) == pytest.approx(8 * 100 * 2 / t_iter)
    eff = (30 + 1) / (30 / 12.5 + 1) / 12.5  # total 1600 = 12.5 x M0
    assert fn.efficiency(1600) == pytest.approx(eff)
    assert fn.goodput(2, 8, 100, 1) == pytest.approx(8 * 100 * 2 / t_iter * eff)


def test_empty_allocation_has_no_goodput():
    fn = make()
    assert fn.goodput(0, 0, 64, 0) == 0.0
    assert fn.throughput(0, 0, 64, 0) == 0.0
    assert fn.optimize(0, 0) == (0.0, 0, 0)


# ------------------------------------------------------------------------ optimize


def test_optimize_hand_checked_argmax():
    # gamma = 1, K = 2 on one node, s = 0: goodput(M) ~ M / ((c + b M) (phi + M)) with
    # c = alpha_grad + alpha_local = 0.1, b = beta_grad / K = 0.001, phi = M0 var/sqr = 1024,
    # so d/dM log goodput = 0  <=>  c phi = b M^2  <=>  M* = sqrt(0.1 * 1024 / 0.001) = 320.
    params = ThroughputParams(0.05, 0.002, 0.05, 0.0, 1.0, 0.0, 1.0)
    fn = GoodputFunction(params, GradStats(sqr=1.0, var=32.0), init_bsz=32, max_bsz=4096,
                         min_local_bsz=8, max_local_bsz=1024)
    best, local, accum = fn.optimize(1, 2)
    assert accum == 0
    # candidates are 10% apart geometrically: the pick is the one nearest the optimum
    assert 320 / 1.11 < 2 * local < 320 * 1.11
    brute = max(float(fn.goodput(1, 2, m, 0)) for m in range(8, 1025))
    assert brute * 0.995 < best <= brute


@pytest.mark.parametrize("nodes, gpus", [(1, 1), (1, 2), (1, 4), (2, 5), (2, 8), (4, 16),
                                         (16, 64), (16, 128), (16, 200)])
@pytest.mark.parametrize("kw", [{}, dict(accumulation=False), dict(max_local_bsz=64),
                                dict(stats=NO_STATS), dict(max_bsz=100, init_bsz=100),
                                dict(max_bsz=1000)])
def test_optimize_matches_plain_reference_and_bounds(nodes, gpus, kw):
    fn = make(**kw)
    best, local, accum = fn.optimize(nodes, gpus)
    assert (best, local, accum) == pytest.approx(reference_optimize(fn, nodes, gpus), rel=1e-12)
    if best > 0:
        assert fn.min_local_bsz <= local <= fn.max_local_bsz
        assert gpus * local * (accum + 1) <= max(fn.max_bsz, fn.init_bsz)
        assert accum >= 0 and (fn.accumulation or accum == 0)
        assert best == pytest.approx(float(fn.goodput(nodes, gpus, local, accum)))
    else:
        assert (local, accum) == (0, 0)


def test_optimize_uses_accumulation_when_memory_is_short():
    fn = make(max_local_bsz=64, stats=NO_STATS)  # efficiency 1: biggest batch wins
    best, local, accum = fn.optimize(1, 4)
    assert accum >= 1 and local <= 64
    assert 4 * local * (accum + 1) == 4096


def test_single_gpu_above_m0_forces_accumulation():
    fn = make(stats=NO_STATS)  # per-GPU limit 1024, but the best total (4096) > M0 on 1 GPU
    best, local, accum = fn.optimize(1, 1)
    assert accum >= 3 and local * (accum + 1) == 4096
    # at M0 itself no accumulation is forced
    fixed = make(max_bsz=128)
    assert fixed.optimize(1, 1) == (pytest.approx(float(fixed.goodput(1, 1, 128, 0))), 128, 0)
    # without accumulation the rule cannot apply: the largest candidate that fits in memory
    best, local, accum = make(stats=NO_STATS, accumulation=False).optimize(1, 1)
    assert accum == 0 and 1024 / 1.11 < local <= 1024


def test_max_bsz_cap_rounds_down():
    fn = make(stats=NO_STATS, init_bsz=64, max_bsz=100, min_local_bsz=8)
    best, local, accum = fn.optimize(1, 3)
    # ceil(100/3) = 34 would exceed max_bsz; the cap gives floor(100/3) = 33
    assert (local, accum) == (33, 0)


def test_fixed_batch_has_a_single_candidate():
    fn = make(max_bsz=128)  # max_bsz == init_bsz: the job keeps M0
    assert fn.optimize(1, 4)[1:] == (32, 0)
    assert make(max_bsz=128, max_local_bsz=16, min_local_bsz=8).optimize(1, 4)[1:] == (16, 1)
    assert make(max_bsz=64).optimize(1, 4)[1:] == (32, 0)  # below M0: also fixed at M0
    assert make(max_bsz=128).optimize(1, 3)[1:] == (42, 0)  # ceil(128/3) capped to 128//3


def test_too_many_gpus_is_infeasible():
    fn = make(max_bsz=1000)  # at most 31 GPUs at 32 per GPU
    assert fn.optimize(8, 31)[0] > 0
    assert fn.optimize(8, 32) == (0.0, 0, 0)


def test_vectorised_optimize_equals_scalar():
    fn = make()
    nodes = np.array([[0, 1, 1, 1], [2, 2, 4, 16]])
    gpus = np.array([[0, 1, 2, 4], [2, 8, 16, 64]])
    best, local, accum = fn.optimize(nodes, gpus)
    assert best.shape == local.shape == accum.shape == (2, 4)
    for idx in np.ndindex(nodes.shape):
        assert (best[idx], local[idx], accum[idx]) == fn.optimize(int(nodes[idx]), int(gpus[idx]))


@pytest.mark.parametrize("seed", range(3))
def test_one_allocation_as_ints_equals_the_array_path_bit_for_bit(seed):
    """`optimize(int, int)` takes a shortcut (one row, no array plumbing): the same numbers as
    the array path, before and after the candidates are remembered, in every batch regime."""
    rng = np.random.default_rng(seed)
    for _ in range(40):
        params = ThroughputParams(*rng.uniform(1e-4, 0.2, 6), rng.uniform(1.0, 4.0))
        init = int(rng.choice([32, 128, 256]))
        fn = make(params=params, init_bsz=init,
                  stats=GradStats(*rng.uniform(0.0, 50.0, 2)) if rng.random() < 0.8 else NO_STATS,
                  max_bsz=int(rng.choice([init // 2, init, 4096])),
                  min_local_bsz=int(rng.choice([1, 16, 32])), max_local_bsz=int(rng.choice([64, 1024])),
                  accumulation=bool(rng.random() < 0.7))
        pairs = [(int(n), int(k)) for n, k in zip(rng.integers(0, 6, 12), rng.integers(0, 80, 12))
                 if n <= k and (n > 0 or k == 0)]
        for n, k in pairs * 2:  # the second pass finds the rows remembered
            best, local, accum = fn.optimize(np.array([n]), np.array([k]))
            one = fn.optimize(n, k)
            assert type(one[0]) is float and type(one[1]) is int and type(one[2]) is int
            assert (one[0].hex(), one[1], one[2]) == (float(best[0]).hex(), int(local[0]),
                                                      int(accum[0])), (n, k)


def test_scalar_results_are_python_numbers():
    best, local, accum = make().optimize(np.int64(1), np.int64(4))
    assert type(best) is float and type(local) is int and type(accum) is int


# ------------------------------------------------------------------------- speedup


class CountingGoodput(GoodputFunction):
    """GoodputFunction that counts how many (N, K) pairs `optimize` evaluated."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.evaluated = 0

    def optimize(self, num_nodes, num_gpus):
        self.evaluated += np.broadcast(np.asarray(num_nodes), np.asarray(num_gpus)).size
        return super().optimize(num_nodes, num_gpus)


def counting(**kw) -> CountingGoodput:
    fn = make(**kw)
    return CountingGoodput(fn.params, fn.stats, fn.init_bsz, fn.max_bsz, fn.min_local_bsz,
                           fn.max_local_bsz, fn.accumulation)


def test_speedup_of_base_is_one_and_ratios_match():
    fn = make()
    speedup = SpeedupFunction(fn, 1, 4)
    assert speedup(1, 4) == 1.0
    assert speedup(2, 8) == pytest.approx(fn.optimize(2, 8)[0] / fn.optimize(1, 4)[0])
    assert speedup(0, 0) == 0.0
    out = speedup(np.array([1, 1, 2]), np.array([1, 4, 8]))
    np.testing.assert_allclose(out, [speedup(1, 1), 1.0, speedup(2, 8)])


def test_speedup_memoises():
    fn = counting()
    speedup = SpeedupFunction(fn, 1, 4)
    after_base = fn.evaluated
    first = speedup(2, 8)
    assert fn.evaluated == after_base + 1
    for _ in range(1000):
        assert speedup(2, 8) == first
    assert fn.evaluated == after_base + 1
    # arrays: only new unique pairs are evaluated, once
    nodes = np.array([[1, 2, 2], [4, 4, 1]])
    gpus = np.array([[1, 8, 8], [16, 16, 1]])
    out = speedup(nodes, gpus)
    assert out.shape == (2, 3)
    assert fn.evaluated == after_base + 3  # (1,1) and (4,16) new; (2,8) known
    speedup(nodes, gpus)
    speedup(64, 256)  # beyond the initial table: grows, one evaluation
    assert fn.evaluated == after_base + 4
    assert speedup(1, 1) == out[0, 0]


def test_speedup_with_infeasible_base_falls_back():
    fn = make(max_bsz=1000)  # 32+ GPUs admit no batch
    speedup = SpeedupFunction(fn, 1, 64)
    assert speedup.base_gpus == 31
    assert speedup(1, 31) == pytest.approx(1.0)
    assert speedup(16, 64) == 0.0
    with pytest.raises(ValueError):
        SpeedupFunction(fn, 1, 0)
