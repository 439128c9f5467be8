"""ONES's progress predictor: GPR on completed jobs' logs -> Beta(alpha, beta) of progress."""

from __future__ import annotations

import numpy as np
import pytest

from corral.perf.progress import EpochLog, GaussianProcess, JobLog, ProgressPredictor


def history(jobs: int = 6) -> list[JobLog]:
    """Completed jobs of two kinds: a small dataset trained 10 epochs, a large one 30 epochs."""
    out = []
    for j in range(jobs):
        size, total = (1_000.0, 10) if j % 2 else (50_000.0, 30)
        first = 1.0 / total
        out.append(JobLog([EpochLog(size, k, metric=k / total, first_metric=first)
                           for k in range(1, total)], float(total)))
    return out


def test_beta_parameters_on_a_hand_made_history():
    pred = ProgressPredictor(seed=1)
    pred.fit(history())
    alpha, beta = pred.beta_params([
        EpochLog(1_000.0, 4.0, metric=0.4, first_metric=0.1),  # 4 of 10 epochs done
        EpochLog(50_000.0, 12.0, metric=0.4, first_metric=1 / 30),  # 12 of 30 done
        EpochLog(1_000.0, 9.5, metric=0.95, first_metric=0.1),  # nearly done
    ])
    # alpha = epochs processed; beta = epochs still to process (10 - 4, 30 - 12, 10 - 9.5 -> 1)
    assert alpha == pytest.approx([4.0, 12.0, 9.5])
    assert beta == pytest.approx([6.0, 18.0, 1.0], abs=0.25)
    mean_progress = alpha / (alpha + beta)
    assert mean_progress[0] == pytest.approx(0.4, abs=0.02)


def test_cold_start_and_the_unimodal_threshold():
    pred = ProgressPredictor()
    assert not pred.trained
    alpha, beta = pred.beta_params([EpochLog(1_000.0, 3.0), EpochLog(1_000.0, 0.2)])
    # no completed job yet: as long again as it has run; both parameters at least 1
    assert alpha == pytest.approx([3.0, 1.0]) and beta == pytest.approx([3.0, 1.0])
    pred.fit(history())
    _, beta = pred.beta_params([EpochLog(1_000.0, 25.0, metric=2.5, first_metric=0.1)])
    assert beta[0] == pytest.approx(1.0)  # past every job seen: thresholded at 1


def test_training_set_is_capped_and_refit_only_after_new_completions():
    pred = ProgressPredictor(max_points=40, seed=0)
    pred.fit(history(6))  # 3 x 9 + 3 x 29 = 114 logged epochs
    assert pred._gp._x.shape[0] == 40
    theta = pred._gp.log_theta.copy()
    pred.fit(history(6))  # same completed jobs: no refit
    assert np.array_equal(theta, pred._gp.log_theta)


def test_gaussian_process_recovers_a_smooth_function():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 6, (60, 1))
    y = np.sin(x[:, 0]) + rng.normal(0, 0.05, 60)
    gp = GaussianProcess().fit(x, y)
    grid = np.linspace(0.5, 5.5, 11)[:, None]
    assert np.max(np.abs(gp.predict(grid) - np.sin(grid[:, 0]))) < 0.15
    with pytest.raises(RuntimeError):
        GaussianProcess().predict(grid)
