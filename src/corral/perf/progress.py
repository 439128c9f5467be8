"""ONES's training-progress predictor: Gaussian-process regression on completed jobs' training
logs, giving a Beta distribution over a running job's progress (ONES (SC'21) §3.2.1, Eq. 6-7).

Progress p ~ `Beta(alpha, beta)`, alpha ~ epochs processed, beta ~ epochs to process; remaining
work `s (1 - p) / p` (Eq. 7). Decided here: alpha is known online (epochs done, floored at 1);
only beta is regressed, by one GPR on every epoch of every completed job, features log epoch
size, epochs done, latest and first-epoch metric (no training loss is reported). ARD
squared-exponential kernel plus noise, hyperparameters by marginal likelihood (L-BFGS-B),
re-optimised per `reoptimize_every`; at most `max_points` points. Cold start: beta = alpha.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize

__all__ = ["EpochLog", "JobLog", "GaussianProcess", "ProgressPredictor", "MIN_SHAPE"]

#: Floor of both Beta parameters (the paper's threshold function: unimodal Beta).
MIN_SHAPE = 1.0


@dataclass(frozen=True, slots=True)
class EpochLog:
    """What a job reported at one point of its training (ONES's per-epoch upload)."""

    epoch_size: float  # samples per epoch (dataset size), E
    epochs_done: float  # samples processed / E
    metric: float = 0.0  # latest validation metric (0 when none yet)
    first_metric: float = 0.0  # metric after the first epoch (0 when none yet)

    def features(self) -> list[float]:
        return [float(np.log(max(self.epoch_size, 1.0))), self.epochs_done, self.metric,
                self.first_metric]


@dataclass(frozen=True, slots=True)
class JobLog:
    """A completed job's history: its reports and the epochs it took in total."""

    epochs: Sequence[EpochLog]
    total_epochs: float


class GaussianProcess:
    """Exact GP regression, squared-exponential ARD kernel + white noise, fitted by ML-II."""

    def __init__(self) -> None:
        self.log_theta: np.ndarray | None = None  # log length-scales..., log sf, log sn
        self._x_mu: np.ndarray | None = None
        self._x_sd: np.ndarray | None = None
        self._y_mu, self._y_sd = 0.0, 1.0
        self._x: np.ndarray | None = None
        self._alpha: np.ndarray | None = None

    @staticmethod
    def _kernel(theta: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        ell, sf = np.exp(theta[:-2]), np.exp(theta[-2])
        d = (a[:, None, :] - b[None, :, :]) / ell
        return sf ** 2 * np.exp(-0.5 * np.sum(d * d, axis=2))

    @staticmethod
    def _nll(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        n, dims = x.shape
        ell, sn = np.exp(theta[:-2]), np.exp(theta[-1])
        sq = (x[:, None, :] - x[None, :, :]) ** 2 / ell ** 2  # (n, n, d)
        kf = np.exp(2 * theta[-2]) * np.exp(-0.5 * sq.sum(axis=2))
        k = kf + (sn ** 2 + 1e-8) * np.eye(n)
        try:
            c = cho_factor(k, lower=True)
        except np.linalg.LinAlgError:
            return 1e10, np.zeros_like(theta)
        a = cho_solve(c, y)
        nll = 0.5 * y @ a + np.sum(np.log(np.diag(c[0]))) + 0.5 * n * np.log(2 * np.pi)
        w = np.outer(a, a) - cho_solve(c, np.eye(n))  # d nll / dK = -w / 2
        grad = np.empty_like(theta)
        for i in range(dims):
            grad[i] = -0.5 * np.sum(w * kf * sq[:, :, i])
        grad[-2] = -0.5 * np.sum(w * 2 * kf)
        grad[-1] = -0.5 * np.trace(w) * 2 * sn ** 2
        return float(nll), grad

    def fit(self, x: np.ndarray, y: np.ndarray, optimize: bool = True) -> GaussianProcess:
        """Condition on (x, y); with `optimize` (always on the first fit) also re-fit the
        hyperparameters by maximising the log marginal likelihood."""
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        self._x_mu, self._x_sd = x.mean(axis=0), x.std(axis=0)
        self._x_sd = np.where(self._x_sd > 1e-9, self._x_sd, 1.0)
        self._y_mu, self._y_sd = float(y.mean()), float(y.std()) or 1.0
        xs = (x - self._x_mu) / self._x_sd
        ys = (y - self._y_mu) / self._y_sd
        dims = x.shape[1]
        start = self.log_theta if self.log_theta is not None and self.log_theta.size == dims + 2 \
            else np.r_[np.zeros(dims), 0.0, np.log(0.1)]
        bounds = [(np.log(1e-2), np.log(1e2))] * dims + [(np.log(1e-2), np.log(1e1)),
                                                         (np.log(1e-3), np.log(1e1))]
        if optimize or self.log_theta is None or self.log_theta.size != dims + 2:
            res = minimize(self._nll, start, args=(xs, ys), jac=True, method="L-BFGS-B",
                           bounds=bounds, options={"maxiter": 60})
            self.log_theta = res.x
        theta = self.log_theta
        k = self._kernel(theta, xs, xs) + (np.exp(2 * theta[-1]) + 1e-8) * np.eye(len(xs))
        self._x, self._alpha = xs, cho_solve(cho_factor(k, lower=True), ys)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Posterior mean at each row of `x`."""
        if self._x is None:
            raise RuntimeError("GaussianProcess.predict before fit")
        assert (self.log_theta is not None and self._alpha is not None
                and self._x_mu is not None and self._x_sd is not None)  # (fit sets them with _x)
        xs = (np.asarray(x, dtype=float) - self._x_mu) / self._x_sd
        return self._kernel(self.log_theta, xs, self._x) @ self._alpha * self._y_sd + self._y_mu


class ProgressPredictor:
    """Beta(alpha, beta) of each running job's progress, learned from completed jobs."""

    def __init__(self, max_points: int = 256, seed: int = 0, reoptimize_every: int = 8) -> None:
        self.max_points = max_points
        self.reoptimize_every = reoptimize_every
        self._rng = np.random.default_rng(seed)
        self._gp = GaussianProcess()
        self._trained_on = 0  # number of completed jobs in the last fit
        self._optimized_on = 0  # ... in the last hyperparameter optimisation

    @property
    def trained(self) -> bool:
        return self._trained_on > 0

    def fit(self, history: Sequence[JobLog]) -> None:
        """Retrain on completed jobs (a no-op when no job completed since the last fit)."""
        if len(history) == self._trained_on:
            return
        rows, targets = [], []
        for job in history:
            for log in job.epochs:
                rows.append(log.features())
                targets.append(job.total_epochs - log.epochs_done)
        if not rows:
            return
        if len(rows) > self.max_points:
            pick = self._rng.choice(len(rows), self.max_points, replace=False)
            rows = [rows[i] for i in pick]
            targets = [targets[i] for i in pick]
        optimize = (len(history) <= 4 * self.reoptimize_every
                    or len(history) - self._optimized_on >= self.reoptimize_every)
        self._gp.fit(np.array(rows), np.array(targets), optimize=optimize)
        self._trained_on = len(history)
        if optimize:
            self._optimized_on = len(history)

    def beta_params(self, logs: Sequence[EpochLog]) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, beta) arrays for running jobs described by their latest `logs`."""
        done = np.array([log.epochs_done for log in logs], dtype=float)
        alpha = np.maximum(done, MIN_SHAPE)
        if not logs:
            return alpha, alpha.copy()
        if not self.trained:
            return alpha, alpha.copy()
        beta = self._gp.predict(np.array([log.features() for log in logs]))
        return alpha, np.maximum(beta, MIN_SHAPE)
