"""Optimus's online convergence fit: predict how many epochs a job still needs.

Optimus (EuroSys'18) §3.1, §4.1, §7: fit `l(k) = 1 / (β0·k + β1) + β2` (Eq. 1, β0, β1 >= 0) to
the outlier-cleaned curve; a job has converged once the per-epoch decrease falls below its
owner's δ, predicted first for a looser δ' = 3δ (§4.1); after a learning-rate drop the fit
restarts (§7). Decided here: the signal is the per-epoch validation metric oriented to
decrease, k counts epochs; least squares in the metric's own units by variable projection
(`fit_loss_curve`, 3 points needed); δ is relative to the fitted span l(1) - β2, so one δ fits
any metric's scale; a drop is a gain >= `jump_factor` x the median change, kept 2 more points.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["LossCurve", "ConvergencePrediction", "fit_loss_curve", "remove_outliers",
           "oriented_loss", "last_segment_start", "predict_total_epochs", "delta_at_epochs"]

MIN_FIT_POINTS = 3
OUTLIER_WINDOW = 5
JUMP_FACTOR = 5.0
JUMP_MIN_SEGMENT = 5
JUMP_CONFIRM = 2


@dataclass(frozen=True, slots=True)
class LossCurve:
    """l(k) = c + a/(k + u) over epochs k = 1, 2, ... of one segment, i.e. Eq. 1 with
    β0 = 1/a, β1 = u/a, β2 = c (a >= 0, u >= 0; a = 0 is a flat curve)."""

    a: float
    u: float
    c: float

    @classmethod
    def from_betas(cls, b0: float, b1: float, b2: float) -> LossCurve:
        if b0 <= 0:
            raise ValueError(f"beta0 must be > 0, got {b0}")
        return cls(1.0 / b0, b1 / b0, b2)

    @property
    def betas(self) -> tuple[float, float, float]:
        """(β0, β1, β2) of Eq. 1 (β0 = inf for a flat curve)."""
        if self.a <= 0:
            return math.inf, math.inf, self.c
        return 1.0 / self.a, self.u / self.a, self.c

    def __call__(self, k: ArrayLike) -> np.ndarray:
        return self.c + self.a / (np.asarray(k, dtype=float) + self.u)

    def relative_drop(self, k: ArrayLike) -> np.ndarray:
        """(l(k) - l(k+1)) / (l(1) - β2): epoch k+1's decrease as a share of the fitted span."""
        x = np.asarray(k, dtype=float) + self.u
        return (1.0 + self.u) / (x * (x + 1.0)) if self.a > 0 else np.zeros_like(x)

    def epochs_to(self, delta: float, max_epochs: int) -> int:
        """First epoch n >= 2 whose own decrease l(n-1) - l(n) is below δ of the span
        (capped at `max_epochs`)."""
        if delta <= 0:
            raise ValueError(f"delta must be > 0, got {delta}")
        if self.a <= 0:
            return 2  # a flat curve has converged
        # relative_drop(k) < δ  <=>  x (x + 1) > (1 + u)/δ with x = k + u.
        x = (-1.0 + math.sqrt(1.0 + 4.0 * (1.0 + self.u) / delta)) / 2.0
        k_first = math.floor(x - self.u) + 1  # first k with relative_drop(k) < δ
        return int(min(max(k_first, 1) + 1, max_epochs))


def oriented_loss(metric: ArrayLike) -> np.ndarray:
    """The metric history as a decreasing, first-value-normalised "loss" (negated if the metric
    has improved upward, as accuracy does)."""
    y = np.asarray(metric, dtype=float)
    if y.size == 0:
        return y
    sign = -1.0 if y.size > 1 and y[-1] > y[0] else 1.0
    scale = abs(y[0]) if y[0] != 0 else (np.max(np.abs(y)) or 1.0)
    return sign * y / scale


def remove_outliers(loss: ArrayLike, window: int = OUTLIER_WINDOW) -> np.ndarray:
    """Replace each point outside [min of the next `window`, max of the previous `window`] by
    the mean of its neighbours (Optimus §3.1); end points are checked on the side they have."""
    y = np.asarray(loss, dtype=float)
    out = y.copy()
    n = y.size
    for i in range(n):
        prev = y[max(0, i - window):i]
        nxt = y[i + 1:i + 1 + window]
        too_high = prev.size and y[i] > prev.max()
        too_low = nxt.size and y[i] < nxt.min()
        if too_high or too_low:
            neighbours = [y[j] for j in (i - 1, i + 1) if 0 <= j < n]
            out[i] = float(np.mean(neighbours))
    return out


def last_segment_start(loss: ArrayLike, jump_factor: float = JUMP_FACTOR) -> int:
    """Index where the last learning-rate segment starts (0 when no drop was seen)."""
    y = [float(v) for v in np.asarray(loss, dtype=float)]
    start = 0
    changes: list[float] = []  # sorted |epoch-to-epoch changes| of the current segment so far
    seg_min = y[0] if y else 0.0
    i = start + 1
    while i + JUMP_CONFIRM < len(y):
        seg_min = min(seg_min, y[i - 1])  # min of y[start:i]
        if i - start >= JUMP_MIN_SEGMENT:
            mid = len(changes) // 2
            scale = changes[mid] if len(changes) % 2 else (changes[mid - 1] + changes[mid]) / 2
            drop = y[i - 1] - y[i]
            if scale > 0 and drop >= jump_factor * scale and max(y[i:i + 1 + JUMP_CONFIRM]) < seg_min:
                start, changes, seg_min = i, [], y[i]
                i += 1
                continue
        bisect.insort(changes, abs(y[i] - y[i - 1]))
        i += 1
    return start


def _fit_at(u: np.ndarray, k: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each shape u, the least-squares (a >= 0, c) of y = c + a/(k+u) and its residual."""
    g = 1.0 / (k[None, :] + u[:, None])
    gm = g.mean(axis=1, keepdims=True)
    ym = y.mean()
    var = ((g - gm) ** 2).sum(axis=1)
    cov = ((g - gm) * (y - ym)).sum(axis=1)
    a = np.maximum(np.where(var > 0, cov / np.where(var > 0, var, 1.0), 0.0), 0.0)
    c = ym - a * gm[:, 0]
    sse = ((c[:, None] + a[:, None] * g - y) ** 2).sum(axis=1)
    return a, c, sse


# Predictions remembered by their exact inputs (`_predict_memo`); an entry holds the history.
_PREDICT_MEMO_SIZE = 4096

_U_GRID = np.concatenate(([0.0], np.geomspace(1e-3, 1e5, 49)))
_REFINE_POINTS = 25
_REFINE_ROUNDS = 4


def fit_loss_curve(loss: ArrayLike) -> LossCurve | None:
    """Least-squares fit of Eq. 1 to `loss` at epochs 1..n; None with fewer than 3 points.

    Variable projection: for a fixed shape u = β1/β0 the model is linear in (1/β0, β2), solved
    in closed form with 1/β0 >= 0; u (>= 0) is found on a log grid, then refined on finer grids
    around the best point (vectorised: a few array operations per fit).
    """
    y = np.asarray(loss, dtype=float)
    if y.size < MIN_FIT_POINTS or not np.all(np.isfinite(y)):
        return None
    k = np.arange(1, y.size + 1, dtype=float)
    grid = _U_GRID
    for _ in range(_REFINE_ROUNDS + 1):
        a, c, sse = _fit_at(grid, k, y)
        i = int(np.argmin(sse))
        best = (float(a[i]), float(grid[i]), float(c[i]))
        lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
        if not hi > lo:
            break
        grid = np.linspace(lo, hi, _REFINE_POINTS)
    return LossCurve(*best)


@dataclass(frozen=True, slots=True)
class ConvergencePrediction:
    """Predicted total epochs to δ (and to the looser δ'), from a metric history."""

    total_epochs: float
    total_epochs_prime: float
    fitted: bool  # False: too few points, the fallback was used
    segment_start: int  # epochs before the last learning-rate segment

    def remaining(self, epochs_done: int) -> float:
        """Epochs still to run: to δ' until it is reached, then to δ (Optimus §4.1 (1))."""
        target = self.total_epochs_prime if self.total_epochs_prime > epochs_done else self.total_epochs
        return max(target - epochs_done, 1.0)

    def before_prime(self, epochs_done: int) -> bool:
        return self.total_epochs_prime > epochs_done


def predict_total_epochs(metric: ArrayLike, delta: float, *, delta_prime: float | None = None,
                         max_epochs: int = 250, fallback_epochs: int = 20) -> ConvergencePrediction:
    """Predict the epoch at which a job converges from its per-epoch metric history.

    With fewer than 3 points in the current segment the prediction is "20 epochs more" (the
    Optimus reference code's fallback). `delta_prime` defaults to 3 δ (the paper's 3% vs 1%).

    The prediction is a pure function of its inputs, so it is remembered by their exact bytes
    (`_predict_memo`): jobs of one application at one batch size have identical histories, and
    a policy asks again for each of them after every epoch.
    """
    y = np.asarray(metric, dtype=float)
    d_prime = 3.0 * delta if delta_prime is None else delta_prime
    deltas = np.array([delta, d_prime], dtype=float)
    return _predict_memo(y.tobytes(), y.shape, deltas.tobytes(), max_epochs, fallback_epochs)


@functools.lru_cache(maxsize=_PREDICT_MEMO_SIZE)
def _predict_memo(metric: bytes, shape: tuple[int, ...], deltas: bytes, max_epochs: int,
                  fallback_epochs: int) -> ConvergencePrediction:
    """`_predict` of the float64 bytes of the history and of (δ, δ'): a hit is the same
    computation by construction; the prediction is immutable, so callers may share it."""
    delta, d_prime = np.frombuffer(deltas).tolist()
    return _predict(np.frombuffer(metric).reshape(shape), delta, d_prime, max_epochs,
                    fallback_epochs)


def _predict(metric: np.ndarray, delta: float, d_prime: float, max_epochs: int,
             fallback_epochs: int) -> ConvergencePrediction:
    """`predict_total_epochs` with δ' given."""
    y = oriented_loss(metric)
    n = y.size
    start = last_segment_start(y) if n else 0
    seg = y[start:]
    curve = fit_loss_curve(remove_outliers(seg / abs(seg[0]) if seg.size and seg[0] else seg))
    if curve is None:
        guess = float(min(n + fallback_epochs, max_epochs))
        return ConvergencePrediction(guess, guess, False, start)
    total = float(min(start + curve.epochs_to(delta, max_epochs), max_epochs))
    total_p = float(min(start + curve.epochs_to(d_prime, max_epochs), max_epochs))
    return ConvergencePrediction(total, min(total_p, total), True, start)


def delta_at_epochs(metric: ArrayLike, epochs: int | None = None) -> float:
    """The relative δ at which the fit of a whole curve stops after exactly `epochs` epochs
    (default: its length): the geometric mean of the last two epochs' relative decreases.

    Used to state a job owner's threshold for jobs that in truth stop after a fixed number of
    epochs (benchmarks/fidelity/optimus_convergence.py).
    """
    y = oriented_loss(metric)
    n = y.size if epochs is None else int(epochs)
    start = last_segment_start(y)
    seg = y[start:n]
    curve = fit_loss_curve(remove_outliers(seg / abs(seg[0])))
    if curve is None:
        raise ValueError("need at least 3 points after the last learning-rate drop")
    k = n - start  # the segment's last epoch
    return float(math.sqrt(curve.relative_drop(max(k - 2, 1)) * curve.relative_drop(k - 1)))
