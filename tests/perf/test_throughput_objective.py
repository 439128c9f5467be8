"""The fit's objective on Python floats equals its array form to the last bit, and so do
whole fits: the throughput fits (and every simulation that uses them) are unchanged by it."""

import numpy as np
import pytest

from corral.perf import throughput as tp
from corral.perf.throughput import ThroughputParams, fit_throughput


def array_loss_and_grad(theta: np.ndarray, points) -> tuple[float, np.ndarray]:
    """The objective as array formulas (spec 1.2.1), the form the fits were first made with."""
    m, extra, local, node, log_step, log_grad = (np.array(c) for c in zip(*points))
    synced = local | node
    ag, bg, al, bl, an, bn, gamma = theta
    n = m.size
    gm1 = gamma - 1.0
    t_grad = ag + bg * m
    t_sync = np.where(local, al + bl * extra, 0.0) + np.where(node, an + bn * extra, 0.0)
    log_tg = np.log(t_grad)
    log_ts = np.log(np.where(synced, t_sync, 1.0))
    g_log_tg, g_log_ts = gamma * log_tg, gamma * log_ts
    lse = np.where(synced, np.logaddexp(g_log_tg, g_log_ts), g_log_tg)
    log_ti = lse / gamma
    d_tg = np.exp(gm1 * log_tg - lse)
    d_ts = np.where(synced, np.exp(gm1 * log_ts - lse), 0.0)
    w_s = np.where(synced, np.exp(g_log_ts - lse), 0.0)
    d_gamma = ((1.0 - w_s) * log_tg + w_s * log_ts - log_ti) / gamma
    e_grad = log_tg - log_grad
    e_iter = log_ti - log_step
    r_grad = np.sqrt(np.sum(e_grad ** 2) / n + tp._RMSE_FLOOR)
    r_iter = np.sqrt(np.sum(e_iter ** 2) / n + tp._RMSE_FLOOR)
    ratio_n, ratio_l = bn / an, bl / al
    loss = (r_grad + r_iter + tp._GAMMA_REG * gm1 ** 2
            + tp._RATIO_REG * (ratio_n ** 2 + ratio_l ** 2))
    c_grad = e_grad / (n * r_grad)
    c_iter = e_iter / (n * r_iter)
    g_tg = c_grad * (1.0 / t_grad) + c_iter * d_tg
    g_s = c_iter * d_ts
    g_ls = g_s * local.astype(float)
    g_ns = g_s * node.astype(float)
    reg = tp._RATIO_REG
    grad = np.array([
        np.sum(g_tg), np.sum(g_tg * m),
        np.sum(g_ls) - 2.0 * reg * ratio_l ** 2 / al, np.sum(g_ls * extra) + 2.0 * reg * ratio_l / al,
        np.sum(g_ns) - 2.0 * reg * ratio_n ** 2 / an, np.sum(g_ns * extra) + 2.0 * reg * ratio_n / an,
        np.sum(c_iter * d_gamma) + 2.0 * tp._GAMMA_REG * gm1,
    ])
    return float(loss), grad


def random_profile(rng: np.random.Generator, points: int):
    """Columns of `points` measured configurations of a random job, duplicates included."""
    true = ThroughputParams(*rng.uniform(0.001, 0.2, 6), rng.uniform(1.0, 3.0))
    nodes = rng.choice([1, 1, 1, 2, 4], points)
    gpus = np.where(nodes > 1, nodes * rng.integers(1, 5, points), rng.integers(1, 9, points))
    bsz = rng.choice([8, 16, 32, 64, 128, 256], points)
    step = tp.iteration_time(true, nodes, gpus, bsz) * rng.uniform(0.9, 1.1, points)
    sync = tp.sync_time(true, nodes, gpus) * rng.uniform(0.0, 1.2, points)
    return nodes.astype(float), gpus.astype(float), bsz.astype(float), step, sync


@pytest.mark.parametrize("seed", range(4))
def test_objective_equals_the_array_form_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        points = tp._aggregate(*random_profile(rng, int(rng.integers(1, 40)))).points
        theta = np.concatenate([np.exp(rng.uniform(np.log(1e-8), np.log(10.0), 6)),
                                [rng.uniform(1.0, 10.0)]])
        loss, grad = tp._loss_and_grad(theta.tolist(), points)
        ref_loss, ref_grad = array_loss_and_grad(theta, points)
        assert loss.hex() == ref_loss.hex()
        assert np.array(grad).tobytes() == ref_grad.tobytes()


@pytest.mark.parametrize("prior_driven", [True, False])
def test_fits_equal_fits_made_with_the_array_form(monkeypatch, prior_driven):
    rng = np.random.default_rng(11 + prior_driven)
    cases = []
    for i in range(12):
        cols = random_profile(rng, int(rng.integers(1, 25)))
        warm = None if i % 3 == 0 else ThroughputParams(*rng.uniform(1e-4, 0.3, 6), 1.5)
        cases.append((cols, warm))

    def fits():
        tp._fit_memo.cache_clear()
        return [fit_throughput(*cols, prior_driven=prior_driven, initial=warm).as_array().tobytes()
                for cols, warm in cases]

    ours = fits()
    monkeypatch.setattr(tp, "_loss_and_grad",
                        lambda theta, points: array_loss_and_grad(np.array(theta), points))
    assert fits() == ours
    tp._fit_memo.cache_clear()
