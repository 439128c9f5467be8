"""Job-side batch choice: no-model default, restart adopts the optimum, hysteresis in a run."""

from __future__ import annotations

import pytest

from corral.core.jobs import BatchConfig
from corral.perf.agent import choose_batch, initial_batch
from corral.perf.estimator import JobEstimator
from corral.perf.throughput import ThroughputParams, grad_time, iteration_time

TRUE = ThroughputParams(0.02, 0.0007, 0.03, 0.002, 0.12, 0.003, 2.0)


def trained(**kw) -> JobEstimator:
    """An estimator that has run 1 and 4 GPUs at a few batch sizes."""
    args = dict(init_bsz=128, max_bsz=4096, min_local_bsz=32, max_local_bsz=1024)
    args.update(kw)
    est = JobEstimator(**args)
    for n, k in ((1, 1), (1, 4), (2, 8)):
        for m in (32, 128, 512):
            step = float(iteration_time(TRUE, n, k, m))
            est.observe_step(n, k, m, step, step - float(grad_time(TRUE, m)))
    est.observe_grad(1.0, 30.0)
    return est


@pytest.mark.parametrize("kw, gpus, expected", [
    ({}, 1, BatchConfig(128, 0)),
    ({}, 3, BatchConfig(43, 0)),  # ceil(128 / 3)
    (dict(max_local_bsz=16, min_local_bsz=8), 2, BatchConfig(16, 3)),  # 64 per GPU = 4 x 16
    (dict(max_local_bsz=24, min_local_bsz=8), 2, BatchConfig(22, 2)),  # ceil(64/24)=3 -> 22
    (dict(max_local_bsz=16, min_local_bsz=8, accumulation=False), 2, BatchConfig(16, 0)),
])
def test_no_model_splits_m0(kw, gpus, expected):
    est = JobEstimator(**{**dict(init_bsz=128, max_bsz=4096, min_local_bsz=32,
                                 max_local_bsz=1024), **kw})
    assert choose_batch(est, 1, gpus) == expected
    assert choose_batch(est, 1, gpus, BatchConfig(999, 0)) == expected
    assert initial_batch(est, gpus) == expected


@pytest.mark.parametrize("nodes, gpus", [(1, 1), (1, 4), (2, 8), (4, 16)])
def test_restart_takes_the_optimum(nodes, gpus):
    est = trained()
    _, local, accum = est.goodput_fn().optimize(nodes, gpus)
    assert choose_batch(est, nodes, gpus) == BatchConfig(local, accum)


def _currents(est: JobEstimator, nodes: int, gpus: int):
    """(ratio best/current, config) for per-GPU batches around the optimum, s = 0."""
    fn = est.goodput_fn()
    best, local, _ = fn.optimize(nodes, gpus)
    out = []
    for m in range(fn.min_local_bsz, fn.max_local_bsz + 1):
        if gpus * m > fn.max_bsz or m == local:
            continue
        out.append((best / float(fn.goodput(nodes, gpus, m, 0)), BatchConfig(m, 0)))
    return out, BatchConfig(local, 0)


def test_hysteresis_keeps_a_nearly_optimal_config():
    est = trained()
    currents, optimum = _currents(est, 2, 8)
    close = [c for r, c in currents if 1.0 < r < 1.05]
    far = [c for r, c in currents if r > 1.05]
    assert close and far  # the test covers both sides of the threshold
    for current in close:
        assert choose_batch(est, 2, 8, current) == current
        assert choose_batch(est, 2, 8, current, hysteresis=1.0) == optimum
    for current in far:
        assert choose_batch(est, 2, 8, current) == optimum
    assert choose_batch(est, 2, 8, optimum) == optimum


def test_current_outside_limits_is_replaced():
    est = trained()
    optimum = choose_batch(est, 2, 8)
    assert choose_batch(est, 2, 8, BatchConfig(2048, 0)) == optimum  # over max_local_bsz
    assert choose_batch(est, 2, 8, BatchConfig(1024, 0)) == optimum  # total 8192 > max_bsz
    no_accum = trained(accumulation=False)
    assert choose_batch(no_accum, 2, 8, BatchConfig(64, 1)) == choose_batch(no_accum, 2, 8)


def test_infeasible_allocation_keeps_current():
    est = trained(max_bsz=1024)  # at most 32 GPUs at 32 per GPU
    assert choose_batch(est, 16, 64, BatchConfig(32, 0)) == BatchConfig(32, 0)
    assert choose_batch(est, 16, 64) == initial_batch(est, 64)


def test_a_profiled_job_without_gradient_statistics_starts_at_m0_split():
    """A one-GPU profile of a type gives a model but no gradient statistics: efficiency would
    count as 1 at every batch and the largest would win. The job keeps M0 split until its first
    statistics; then it takes the optimum."""
    est = JobEstimator(init_bsz=128, max_bsz=4096, min_local_bsz=32, max_local_bsz=1024)
    est.bootstrap("k80", float(iteration_time(TRUE, 1, 1, 128)), 128)
    assert est.goodput_fn("k80").optimize(1, 4)[1] > 32  # the model alone wants more than M0
    assert choose_batch(est, 1, 4, gpu_type="k80") == initial_batch(est, 4, "k80")
    assert choose_batch(est, 1, 4, BatchConfig(64, 0), gpu_type="k80") == BatchConfig(64, 0)
    est.observe_grad(1.0, 30.0)
    _, local, accum = est.goodput_fn("k80").optimize(1, 4)
    assert choose_batch(est, 1, 4, gpu_type="k80") == BatchConfig(local, accum)
