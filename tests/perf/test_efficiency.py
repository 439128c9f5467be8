"""Statistical efficiency (Pollux Eq. 5-6) and the AdaScale gain, on hand-computed numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from corral.perf.efficiency import NO_STATS, GradStats, efficiency, gain


def test_gain_hand_numbers():
    stats = GradStats(sqr=1.0, var=3.0)
    # r = (3 + 1) / (3/4 + 1)
    assert gain(stats, 4) == pytest.approx(4 / 1.75)
    assert gain(stats, 1) == pytest.approx(1.0)
    assert efficiency(stats, 100, 400) == pytest.approx(4 / 1.75 / 4)
    assert efficiency(stats, 100, 100) == pytest.approx(1.0)


def test_matches_eq6_noise_scale_form():
    stats = GradStats(sqr=0.5, var=4.0)
    init = 128
    phi = init * stats.noise_scale  # PGNS in examples
    totals = np.array([128, 256, 1000, 4096])
    np.testing.assert_allclose(efficiency(stats, init, totals), (phi + init) / (phi + totals))


def test_noise_scale():
    assert GradStats(sqr=2.0, var=6.0).noise_scale == pytest.approx(3.0)
    assert GradStats(sqr=0.0, var=1.0).noise_scale == math.inf


def test_no_stats_means_perfect_efficiency():
    totals = np.array([1, 10, 128, 10 ** 6])
    np.testing.assert_allclose(efficiency(NO_STATS, 10, totals), 1.0)
    np.testing.assert_allclose(gain(NO_STATS, totals / 10), totals / 10)


def test_zero_denominator_gives_gain_one():
    assert gain(GradStats(sqr=0.0, var=0.0), 8) == 1.0


def test_broadcasts_and_decreases_with_batch():
    stats = GradStats(sqr=1.0, var=10.0)
    scales = np.array([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]])
    r = gain(stats, scales)
    assert r.shape == (2, 3)
    eff = r / scales
    flat = eff.ravel()
    assert np.all(np.diff(flat) < 0)  # larger batches: less progress per example
    assert np.all(np.diff(r.ravel()) > 0)  # ... but more per step
    assert np.all(r <= scales + 1e-12)  # never better than linear


def test_scalar_in_scalar_out():
    r = gain(GradStats(1.0, 1.0), 2)
    assert np.ndim(r) == 0 and isinstance(float(r), float)
