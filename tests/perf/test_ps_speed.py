"""Optimus's parameter-server speed model (Eq. 3-4) and its NNLS fit."""

from __future__ import annotations

import numpy as np
import pytest

from corral.perf.ps_speed import PsSpeedModel, fit_ps_speed


def test_sync_fit_recovers_theta() -> None:
    theta = (0.002, 0.05, 0.03, 0.004, 0.001)
    truth = PsSpeedModel(theta, global_bsz=256)
    p, w = np.meshgrid(np.arange(1, 6), np.arange(1, 9))
    f = truth.speed(p.ravel(), w.ravel())
    fit = fit_ps_speed(p.ravel(), w.ravel(), f, global_bsz=256)
    assert fit.theta == pytest.approx(theta, rel=1e-6, abs=1e-9)
    assert fit.step_time(2, 4) == pytest.approx(1 / truth.speed(2, 4))


def test_async_fit_recovers_theta() -> None:
    theta = (0.5, 0.2, 0.01, 0.03)
    truth = PsSpeedModel(theta, global_bsz=None)
    p, w = np.meshgrid(np.arange(1, 5), np.arange(1, 7))
    fit = fit_ps_speed(p.ravel(), w.ravel(), truth.speed(p.ravel(), w.ravel()), global_bsz=None)
    assert fit.theta == pytest.approx(theta, rel=1e-6, abs=1e-9)
    assert not fit.synchronous


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        fit_ps_speed([], [], [], global_bsz=1)
    with pytest.raises(ValueError):
        fit_ps_speed([1], [1], [0.0], global_bsz=1)
