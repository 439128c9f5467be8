"""The direct L-BFGS-B driver: the same minimiser as scipy.optimize.minimize, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import corral.perf.lbfgsb as lbfgsb
from corral.perf.throughput import ThroughputParams, _fit_memo, fit_throughput, iteration_time

pytestmark = pytest.mark.skipif(not lbfgsb.uses_direct_driver(),
                                reason="this scipy has no compatible compiled L-BFGS-B step: "
                                       "fits go through scipy.optimize.minimize")

TRUE = ThroughputParams(0.05, 0.002, 0.03, 0.004, 0.15, 0.01, 1.5)


def _profiles(count: int):
    """Throughput profiles as jobs see them: a few configurations, noisy step times, some
    on one GPU only (pinned parameters), some over nodes."""
    rng = np.random.default_rng(11)
    shapes = [(1, 1), (1, 2), (1, 4), (2, 4), (2, 8), (4, 16)]
    for _ in range(count):
        picks = rng.choice(len(shapes), size=rng.integers(1, 5), replace=False)
        cfg = [(*shapes[i], b) for i in picks for b in rng.choice([8, 16, 32, 64, 128], 2)]
        n, k, m = (np.array(c, dtype=float) for c in zip(*cfg))
        step = iteration_time(TRUE, n, k, m) * np.exp(0.05 * rng.standard_normal(n.size))
        yield n, k, m, step, step * rng.uniform(0.0, 0.5, n.size)


def _fits(monkeypatch, direct: bool) -> list[bytes]:
    monkeypatch.setattr(lbfgsb, "uses_direct_driver", lambda: direct)
    _fit_memo.cache_clear()
    out = []
    for cols in _profiles(40):
        first = fit_throughput(*cols)
        warm = fit_throughput(*cols[:3], cols[3] * 1.1, cols[4], initial=first)
        out += [first.as_array().tobytes(), warm.as_array().tobytes()]
    _fit_memo.cache_clear()
    return out


def test_direct_driver_fits_equal_scipy_minimize_bit_for_bit(monkeypatch):
    direct = _fits(monkeypatch, True)
    public = _fits(monkeypatch, False)
    assert len(set(direct)) > 40  # the profiles differ: not one fit compared 80 times
    assert direct == public


def test_direct_driver_respects_bounds_and_stops_at_maxiter():
    calls = []

    def fun(x):
        calls.append(x.copy())
        return float(np.sum((x - 3.0) ** 2)), 2.0 * (x - 3.0)

    x = lbfgsb.minimize_lbfgsb(fun, np.zeros(2), np.array([-1.0, -1.0]), np.array([1.0, 2.0]),
                               ftol=1e-12, gtol=1e-9, maxiter=500)
    assert x.tolist() == [1.0, 2.0]  # the constrained minimum, at the upper bounds
    calls.clear()

    def wavy(x):
        calls.append(x.copy())
        return float(np.sum(np.cos(x) * x ** 2)), np.cos(x) * 2 * x - np.sin(x) * x ** 2

    lbfgsb.minimize_lbfgsb(wavy, np.full(3, 0.7), np.full(3, -5.0), np.full(3, 5.0),
                           ftol=1e-12, gtol=1e-9, maxiter=1)
    # one iteration: the start and the line search's points, not a full solve
    assert 2 <= len(calls) <= 1 + 20
