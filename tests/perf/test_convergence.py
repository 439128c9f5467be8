"""Optimus's convergence fit: Eq. 1, outliers, learning-rate drops, epochs to δ."""

from __future__ import annotations

import numpy as np
import pytest

from corral.perf.convergence import (
    LossCurve,
    _predict_memo,
    delta_at_epochs,
    fit_loss_curve,
    last_segment_start,
    oriented_loss,
    predict_total_epochs,
    remove_outliers,
)

SEQ2SEQ = (0.21, 1.07, 0.07)  # Optimus Fig. 5's fitted coefficients


def test_fit_recovers_known_parameters() -> None:
    k = np.arange(1, 41)
    curve = LossCurve.from_betas(*SEQ2SEQ)
    fit = fit_loss_curve(curve(k))
    assert fit is not None
    assert fit.betas == pytest.approx(SEQ2SEQ, rel=1e-4)


def test_fit_recovers_parameters_under_noise() -> None:
    k = np.arange(1, 41)
    y = LossCurve.from_betas(*SEQ2SEQ)(k) + np.random.default_rng(1).normal(0, 0.003, k.size)
    b0, b1, b2 = fit_loss_curve(y).betas
    assert b0 == pytest.approx(0.21, rel=0.1)
    assert b1 == pytest.approx(1.07, rel=0.1)
    assert b2 == pytest.approx(0.07, abs=0.01)


def test_too_few_points_cannot_be_fitted() -> None:
    assert fit_loss_curve([1.0, 0.5]) is None


def test_epochs_to_matches_a_scan() -> None:
    curve = LossCurve.from_betas(*SEQ2SEQ)
    for delta in (0.05, 0.01, 1e-3):
        k = np.arange(1, 10_000)
        first = int(k[np.argmax(curve.relative_drop(k) < delta)])
        assert curve.epochs_to(delta, 10_000) == first + 1
    assert curve.epochs_to(1e-9, 50) == 50  # capped


def test_outlier_is_replaced_by_neighbour_mean() -> None:
    y = np.array([1.0, 0.8, 0.7, 1.2, 0.6, 0.55, 0.5, 0.48])
    out = remove_outliers(y)
    assert out[3] == pytest.approx((0.7 + 0.6) / 2)  # above the max of its previous 5
    assert np.array_equal(np.delete(out, 3), np.delete(y, 3))


def test_accuracy_is_oriented_as_a_decreasing_loss() -> None:
    acc = [0.4, 0.6, 0.7, 0.75]
    loss = oriented_loss(acc)
    assert np.all(np.diff(loss) < 0)
    assert loss[0] == pytest.approx(-1.0)


def test_learning_rate_drop_starts_a_new_segment() -> None:
    k = np.arange(1, 31)
    first = 1 / (0.5 * k + 1) + 0.5
    second = 1 / (0.5 * np.arange(1, 16) + 1) * 0.3 + 0.2
    y = np.concatenate([first, second])
    assert last_segment_start(y) == 30
    assert last_segment_start(first) == 0


def test_whole_curve_predicts_its_own_length() -> None:
    k = np.arange(1, 61)
    y = LossCurve.from_betas(*SEQ2SEQ)(k)
    delta = delta_at_epochs(y)
    pred = predict_total_epochs(y, delta)
    assert pred.fitted and pred.total_epochs == 60
    early = predict_total_epochs(y[:20], delta)  # a noiseless curve extrapolates exactly
    assert early.total_epochs == 60
    assert early.total_epochs_prime < 60 and early.before_prime(20)
    assert early.remaining(20) == early.total_epochs_prime - 20


def test_fallback_before_three_points() -> None:
    pred = predict_total_epochs([0.9, 0.8], 0.01, fallback_epochs=20)
    assert not pred.fitted and pred.total_epochs == 22


def test_prediction_is_remembered_by_its_exact_inputs():
    history = [0.2, 0.5, 0.62, 0.7, 0.74, 0.77]
    _predict_memo.cache_clear()
    first = predict_total_epochs(history, 0.01)
    assert predict_total_epochs(np.array(history), 0.01, delta_prime=3.0 * 0.01) is first
    assert predict_total_epochs(history, 0.01, delta_prime=0.02) is not first
    _predict_memo.cache_clear()
    assert predict_total_epochs(tuple(history), 0.01) == first  # computed afresh: the same
    with pytest.raises(ValueError):  # invalid inputs raise every time, never remembered
        predict_total_epochs(history, 0.0)
    with pytest.raises(ValueError):
        predict_total_epochs(history, 0.0)
