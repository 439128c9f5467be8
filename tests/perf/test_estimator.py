"""JobEstimator: running means, staleness, lazy refits, goodput function, serialisation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from corral.perf.efficiency import NO_STATS, GradStats
from corral.perf.estimator import JobEstimator
from corral.perf.throughput import ThroughputParams, fit_throughput, grad_time, iteration_time

TRUE = ThroughputParams(0.05, 0.002, 0.03, 0.004, 0.15, 0.01, 1.5)


def make(**kw) -> JobEstimator:
    args = dict(init_bsz=128, max_bsz=4096, min_local_bsz=32, max_local_bsz=1024)
    args.update(kw)
    return JobEstimator(**args)


def observe_true(est: JobEstimator, nodes: int, gpus: int, local_bsz: int, count: int = 1,
                 scale: float = 1.0) -> None:
    step = float(iteration_time(TRUE, nodes, gpus, local_bsz)) * scale
    est.observe_step(nodes, gpus, local_bsz, step, step - float(grad_time(TRUE, local_bsz)),
                     count)


def test_empty_estimator_has_no_model():
    est = make()
    assert not est.has_observations and est.num_configs == 0 and est.max_gpus_observed == 0
    assert est.throughput_params() is None
    assert est.goodput_fn() is None


def test_running_mean_with_counts():
    est = make()
    est.observe_step(1, 2, 64, 1.0, 0.1, count=1)
    est.observe_step(1, 2, 64, 2.0, 0.5, count=3)
    assert est.profile()[(1, 2, 64)] == (4, pytest.approx(1.75), pytest.approx(0.4))
    assert est.num_configs == 1 and est.max_gpus_observed == 2 and est.has_observations


def test_fits_lazily_and_only_when_stale():
    est = make()
    for m in (32, 64, 128):
        for _ in range(20):
            observe_true(est, 1, 1, m)
    assert est.fit_count == 0  # observing alone never fits
    first = est.throughput_params()
    assert est.fit_count == 1
    assert est.throughput_params() is first and est.fit_count == 1  # cached

    observe_true(est, 1, 1, 64, count=50)  # same key, same mean
    observe_true(est, 1, 1, 64, count=1, scale=1.2)  # mean moves by < 1% (0.2/51 ~ 0.4%)
    assert not est.is_stale
    assert est.throughput_params() is first and est.fit_count == 1

    observe_true(est, 1, 1, 64, count=20, scale=1.2)  # now the mean moved by > 1%
    assert est.is_stale
    est.throughput_params()
    assert est.fit_count == 2

    observe_true(est, 1, 2, 64)  # new key
    assert est.is_stale
    est.goodput_fn()
    assert est.fit_count == 3 and est.max_gpus_observed == 2


def test_slow_drift_is_caught_against_the_fitted_mean():
    est = make()
    observe_true(est, 1, 1, 64)
    est.throughput_params()
    for _ in range(30):  # each step moves the mean < 1%, together they move it > 1%
        observe_true(est, 1, 1, 64, scale=1.1)
    assert est.is_stale


def test_fit_equals_direct_fit_of_the_means():
    est = make()
    configs = [(1, 1, 32), (1, 1, 128), (1, 2, 64), (1, 4, 64), (2, 8, 128), (2, 4, 32)]
    for n, k, m in configs:
        observe_true(est, n, k, m, count=3)
    n, k, m = (np.array(c) for c in zip(*configs))
    step = iteration_time(TRUE, n, k, m)
    direct = fit_throughput(n, k, m, step, step - grad_time(TRUE, m))
    np.testing.assert_allclose(est.throughput_params().as_array(), direct.as_array(), rtol=1e-9)
    np.testing.assert_allclose(iteration_time(direct, n, k, m), step, rtol=0.02)


def test_single_gpu_job_predicts_perfect_scaling():
    est = make()
    for m in (64, 128):
        observe_true(est, 1, 1, m)
    fn = est.goodput_fn()
    assert fn.throughput(4, 16, 128, 0) == pytest.approx(16 * fn.throughput(1, 1, 128, 0),
                                                         rel=1e-5)


def test_goodput_fn_uses_latest_grad_stats():
    est = make()
    observe_true(est, 1, 1, 128)
    assert est.goodput_fn().stats == NO_STATS  # no statistics yet: efficiency 1
    est.observe_grad(2.0, 5.0)
    fn = est.goodput_fn()
    assert fn.stats == GradStats(2.0, 5.0) and fn.max_bsz == 4096
    assert est.goodput_fn() is fn  # cached until something changes
    est.observe_grad(-1.0, 0.0)  # floored as the agent reports them
    assert est.goodput_fn().stats == GradStats(0.0, 1e-6)
    assert est.fit_count == 1  # new statistics never refit the throughput model
    fn = est.goodput_fn()
    est.observe_grad(-2.0, 1e-9)  # floored to the same statistics: nothing changes
    assert est.goodput_fn() is fn
    est.observe_grad(2.0, 5.0)  # statistics seen before (shared, immutable) are new to this job
    assert est.goodput_fn().stats == GradStats(2.0, 5.0)


def test_deferred_grad_stats_are_read_when_asked_for_and_end_as_observed():
    """`observe_grad_later` reads nothing until the statistics are asked for, reads only the
    latest, and leaves the estimator as the same eager observations would."""
    reads: list[tuple[float, int]] = []

    def truth(bsz: float, epoch: int) -> tuple[float, float]:
        reads.append((bsz, epoch))
        return 1.0, bsz / 10 + epoch

    lazy, eager = make(), make()
    for est in (lazy, eager):
        observe_true(est, 1, 1, 128)
    for key in [(128, 0), (128, 1), (256, 1)]:
        lazy.observe_grad_later(truth, key)
        eager.observe_grad(1.0, key[0] / 10 + key[1])
    assert reads == []
    assert lazy.grad_stats == eager.grad_stats == GradStats(1.0, 26.6)
    assert reads == [(256, 1)]
    assert lazy.goodput_fn().stats == eager.goodput_fn().stats
    fn = lazy.goodput_fn()
    lazy.observe_grad_later(truth, (512, 2))  # new statistics drop the goodput function
    assert lazy.goodput_fn() is not fn and lazy.goodput_fn().stats == GradStats(1.0, 53.2)
    fn = lazy.goodput_fn()
    lazy.observe_grad_later(truth, (512, 2))  # the same statistics again: nothing changes
    assert lazy.goodput_fn() is fn
    lazy.observe_grad_later(truth, (1024, 3))
    lazy.observe_grad(2.0, 5.0)  # an eager observation is newer than the deferred one
    assert lazy.grad_stats == GradStats(2.0, 5.0) and reads[-1] == (512, 2)
    lazy.observe_grad_later(truth, (1024, 3))
    assert lazy.to_dict()["grad"] == {"sqr": 1.0, "var": 105.4}


def test_non_adaptive_job_keeps_m0_and_unit_efficiency():
    est = make(adaptive=False, accumulation=False)
    observe_true(est, 1, 1, 128)
    est.observe_grad(1.0, 100.0)
    fn = est.goodput_fn()
    assert fn.stats == NO_STATS and fn.max_bsz == 128 and fn.init_bsz == 128
    assert not fn.accumulation
    assert fn.optimize(1, 2)[1:] == (64, 0)


def test_rejects_bad_observations():
    est = make()
    with pytest.raises(ValueError):
        est.observe_step(2, 1, 64, 0.1, 0.0)  # more nodes than GPUs
    with pytest.raises(ValueError):
        est.observe_step(1, 1, 64, 0.0, 0.0)
    est.observe_step(1, 1, 64, 0.1, 0.0, count=0)  # nothing observed
    assert not est.has_observations


@pytest.mark.parametrize("fit_first", [True, False])
def test_to_dict_round_trip(fit_first):
    est = make(accumulation=False)
    for n, k, m in [(1, 1, 64), (1, 2, 64), (2, 4, 32)]:
        observe_true(est, n, k, m, count=7)
    est.observe_grad(1.5, 20.0)
    if fit_first:
        est.throughput_params()
    data = json.loads(json.dumps(est.to_dict()))  # JSON-safe
    back = JobEstimator.from_dict(data)
    assert back.profile() == est.profile()
    assert back.to_dict() == est.to_dict()
    assert back.grad_stats == est.grad_stats
    assert (back.max_gpus_observed, back.num_configs) == (2 * 2, 3)
    assert back.is_stale == est.is_stale == (not fit_first)
    assert back.throughput_params() == est.throughput_params()
    assert back.fit_count == (0 if fit_first else 1)  # a restored fit is not redone
    assert not back.goodput_fn().accumulation
    # the restored estimator keeps tracking staleness against the fitted means
    observe_true(back, 1, 1, 64, count=7, scale=1.1)
    assert back.is_stale
