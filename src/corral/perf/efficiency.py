"""Statistical efficiency of a batch size from gradient statistics (Pollux Eq. 5-6, AdaScale gain).

A larger batch makes more progress per step but less per example: the gain r(S) (progress of
one step at S = M/M0, in M0-steps) and efficiency r(S)/S. Pollux (OSDI'21) §3.1, Eq. 5-6:
r(S) = (var + sqr) / (var/S + sqr), Eq. 6 with phi = M0 * var / sqr. Without statistics
(sqr=0, var=1) efficiency is 1, as for non-adaptive jobs (§4.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["GradStats", "NO_STATS", "gain", "efficiency"]


@dataclass(frozen=True, slots=True)
class GradStats:
    """Gradient statistics: `sqr` = |g|^2 of the true gradient, `var` = its variance at batch M0."""

    sqr: float
    var: float

    @property
    def noise_scale(self) -> float:
        """Gradient noise scale in units of M0-sized batches (var/sqr); inf when sqr is 0."""
        return self.var / self.sqr if self.sqr != 0 else math.inf


#: No statistics (non-adaptive job, or none measured yet): efficiency 1 at every batch size.
NO_STATS = GradStats(sqr=0.0, var=1.0)


def gain(stats: GradStats, scale: ArrayLike) -> Any:
    """Progress of one step at `scale` x M0, in M0-steps; 1 where the denominator is 0."""
    if isinstance(scale, (int, float)):  # a training job's every step: skip numpy's overhead
        den = stats.var / scale + stats.sqr
        return (stats.var + stats.sqr) / den if den != 0 else 1.0
    s = np.asarray(scale, dtype=float)
    num = stats.var + stats.sqr
    den = stats.var / s + stats.sqr
    safe = np.where(den != 0, den, 1.0)
    r = np.where(den != 0, num / safe, 1.0)
    return r[()] if r.ndim == 0 else r


def efficiency(stats: GradStats, init_bsz: ArrayLike, total_bsz: ArrayLike) -> Any:
    """Progress per example at `total_bsz` relative to `init_bsz` (Eq. 6): gain(S)/S, S = M/M0."""
    scale = np.asarray(total_bsz, dtype=float) / np.asarray(init_bsz, dtype=float)
    return gain(stats, scale) / scale
