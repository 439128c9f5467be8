"""Optimus's resource-speed model for parameter-server training, and its NNLS fit.

Optimus (EuroSys'18) §3.2: steps per second with p PSes and w workers, θ >= 0,

    synchronous:   f(p, w) = (θ0·M/w + θ1 + θ2·w/p + θ3·w + θ4·p)^-1      (Eq. 4, global batch M)
    asynchronous:  f(p, w) = w·(θ0 + θ1·w/p + θ2·w + θ3·p)^-1             (Eq. 3)

Decided here: exact NNLS (scipy `nnls`) on the reciprocal forms, linear in θ, duplicates
averaged. All-reduce jobs use `corral.perf.throughput` instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import nnls

__all__ = ["PsSpeedModel", "fit_ps_speed"]


def _features(num_ps: ArrayLike, num_workers: ArrayLike, global_bsz: float | None) -> np.ndarray:
    p = np.asarray(num_ps, dtype=float)
    w = np.asarray(num_workers, dtype=float)
    if global_bsz is None:  # asynchronous, Eq. 3: w/f = θ0 + θ1 w/p + θ2 w + θ3 p
        return np.stack([np.ones_like(w), w / p, w, p], axis=-1)
    return np.stack([global_bsz / w, np.ones_like(w), w / p, w, p], axis=-1)  # Eq. 4: 1/f


@dataclass(frozen=True, slots=True)
class PsSpeedModel:
    """Fitted θ of Eq. 4 (`global_bsz` set: synchronous) or Eq. 3 (`global_bsz=None`)."""

    theta: tuple[float, ...]
    global_bsz: float | None

    @property
    def synchronous(self) -> bool:
        return self.global_bsz is not None

    def speed(self, num_ps: ArrayLike, num_workers: ArrayLike) -> np.ndarray:
        """Training steps per second with `num_ps` PSes and `num_workers` workers."""
        denom = _features(num_ps, num_workers, self.global_bsz) @ np.asarray(self.theta)
        w = np.asarray(num_workers, dtype=float)
        num = 1.0 if self.synchronous else w
        with np.errstate(divide="ignore"):
            return np.where(denom > 0, num / np.where(denom > 0, denom, 1.0), np.inf)

    def step_time(self, num_ps: ArrayLike, num_workers: ArrayLike) -> np.ndarray:
        """Seconds per (global) step: 1/f for synchronous training."""
        return 1.0 / self.speed(num_ps, num_workers)


def fit_ps_speed(num_ps: ArrayLike, num_workers: ArrayLike, speed: ArrayLike, *,
                 global_bsz: float | None) -> PsSpeedModel:
    """NNLS fit of θ to measured speeds (steps/s) at (p, w) points; `global_bsz=None` fits the
    asynchronous form. Raises ValueError on empty or non-positive input."""
    p = np.asarray(num_ps, dtype=float).ravel()
    w = np.asarray(num_workers, dtype=float).ravel()
    f = np.asarray(speed, dtype=float).ravel()
    if p.size == 0 or not (p.size == w.size == f.size):
        raise ValueError("fit_ps_speed needs equally long, non-empty p, w and speed columns")
    if np.any(p < 1) or np.any(w < 1) or not np.all(np.isfinite(f)) or np.any(f <= 0):
        raise ValueError("fit_ps_speed: p, w must be >= 1 and speeds finite and > 0")
    if global_bsz is not None and global_bsz <= 0:
        raise ValueError(f"global batch size must be > 0, got {global_bsz}")
    keys, inverse = np.unique(np.stack([p, w], axis=1), axis=0, return_inverse=True)
    inverse = inverse.ravel()
    target = (1.0 / f) if global_bsz is not None else (w / f)
    mean_target = np.bincount(inverse, weights=target) / np.bincount(inverse)
    a = _features(keys[:, 0], keys[:, 1], global_bsz)
    # Weight rows by 1/target so the residuals are relative (steps of very different lengths
    # count alike), as the paper's relative error metric.
    scale = 1.0 / mean_target
    theta, _ = nnls(a * scale[:, None], mean_target * scale)
    return PsSpeedModel(tuple(float(t) for t in theta), global_bsz)
