"""Gittins index of a job from a distribution of job service (GPU-time), for 2D-Gittins.

Tiresias (NSDI'19) §3.2.2, Pseudocode 1: a job with attained service `a` (GPU-s) ranks by
`G(a, Δ) = P(S - a <= Δ | S > a) / E[min(S - a, Δ) | S > a]`, S drawn from the history
distribution: the chance to finish within quantum Δ per unit of service used; higher runs
first. Decided here: `s - a` in the expectation (the reference simulator's raw `s` deviates
from the formula); a job past the largest sample gets 0; `quantum=None` takes the supremum
over Δ, reached at a sample point, so only those are tried.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from corral.core.errors import InputError

__all__ = ["ServiceDistribution", "load_service_distribution"]


class ServiceDistribution:
    """An empirical distribution of total job service (GPU-seconds), queried in O(log n)."""

    __slots__ = ("samples", "_prefix")

    def __init__(self, samples: ArrayLike) -> None:
        s = np.sort(np.asarray(samples, dtype=float).ravel())
        if s.size == 0:
            raise ValueError("a service distribution needs at least one sample")
        if not np.all(np.isfinite(s)) or s[0] < 0:
            raise ValueError("service samples must be finite and >= 0")
        self.samples = s
        self._prefix = np.concatenate(([0.0], np.cumsum(s)))  # _prefix[i] = sum(s[:i])

    def __len__(self) -> int:
        return int(self.samples.size)

    def gittins_index(self, attained: float, quantum: float | None = None) -> float:
        """G(attained, quantum); `quantum=None` is the supremum over all quanta."""
        s = self.samples
        lo = int(np.searchsorted(s, attained, side="right"))  # first survivor: s > attained
        survivors = s.size - lo
        if survivors == 0:
            return 0.0
        if quantum is None:
            return self._sup_index(attained, lo)
        if quantum <= 0:
            raise ValueError(f"quantum must be > 0, got {quantum}")
        hi = int(np.searchsorted(s, attained + quantum, side="right"))  # s <= a + Δ
        done = hi - lo
        used = (self._prefix[hi] - self._prefix[lo]) - done * attained + quantum * (s.size - hi)
        return float(done / used) if used > 0 else 0.0

    def _sup_index(self, attained: float, lo: int) -> float:
        s = self.samples
        ends = s[lo:] - attained  # candidate quanta Δ_j = s_j - a (>0)
        # Samples tied with s_j finish within Δ_j too: count up to the last equal value.
        hi = np.searchsorted(s, s[lo:], side="right")
        done = hi - lo
        used = (self._prefix[hi] - self._prefix[lo]) - done * attained + ends * (s.size - hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(used > 0, done / used, 0.0)
        return float(ratio.max())

    def survival(self, attained: float) -> float:
        """P(S > attained)."""
        return float((self.samples.size - np.searchsorted(self.samples, attained, side="right"))
                     / self.samples.size)


def load_service_distribution(path: str | Path) -> ServiceDistribution:
    """Read GPU-second samples from a one-column CSV (header such as `duration`), e.g. the
    Tiresias simulator's `yarn-gput10000.csv`. Bad input raises a one-line InputError."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: service distribution file not found")
    values: list[float] = []
    with path.open(newline="") as fh:
        for lineno, row in enumerate(csv.reader(fh), start=1):
            if not row or not row[0].strip():
                continue
            try:
                v = float(row[0])
            except ValueError:
                if lineno == 1:
                    continue  # header
                raise InputError(f"{path}: row {lineno}: expected GPU-seconds, got {row[0]!r}") from None
            if not np.isfinite(v) or v < 0:
                raise InputError(f"{path}: row {lineno}: GPU-seconds must be finite and >= 0, got {v}")
            values.append(v)
    if not values:
        raise InputError(f"{path}: no GPU-time samples")
    return ServiceDistribution(values)
