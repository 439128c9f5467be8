"""Gradient noise scale estimation (Pollux (OSDI'21) §3.1, Eq. 5; McCandlish et al. App. A.1).

From c gradient samples of equal batch, combined batch S = M/M0 times the initial batch:
    local_sqr = mean_k |P g_k|^2,  total_sqr = |P mean_k g_k|^2
    |g|^2  ~ (c * total_sqr - local_sqr) / (c - 1)
    var    ~ (local_sqr - total_sqr) * S / (c - 1)          (the variance at batch M0)

Samples: all micro-batch gradients (c = K (s+1)), or, for one worker without accumulation, also
the previous step's (biased). EMA factor 0.999^S (Pollux artifact); floored. Torch-free.
"""

from __future__ import annotations

from typing import Any

from corral.perf.efficiency import GradStats

__all__ = ["GradNoise", "DEFAULT_SMOOTHING", "estimate"]

DEFAULT_SMOOTHING = 0.999


def estimate(local_sqr: Any, total_sqr: Any, count: int, scale: float) -> tuple[Any, Any]:
    """One step's (|g|^2, var) from `count` >= 2 samples; floats or (device) tensors alike."""
    if count < 2:
        raise ValueError("the noise estimate needs at least two gradient samples")
    sqr = (count * total_sqr - local_sqr) / (count - 1)
    var = (local_sqr - total_sqr) * scale / (count - 1)
    return sqr, var


class GradNoise:
    """Smoothed |g|^2 and variance estimates from per-step squared norms."""

    def __init__(self, smoothing: float = DEFAULT_SMOOTHING) -> None:
        self.smoothing = smoothing
        self._sqr = 0.0
        self._var = 0.0
        self._weight = 0.0  # bias correction: sum of EMA weights so far
        self.updates = 0

    def update(self, local_sqr: float, total_sqr: float, count: int, scale: float) -> None:
        """One step's estimate from `count` >= 2 samples whose combined scale is `scale`."""
        sqr, var = estimate(local_sqr, total_sqr, count, scale)
        theta = self.smoothing ** scale
        self._sqr = theta * self._sqr + (1 - theta) * sqr
        self._var = theta * self._var + (1 - theta) * var
        self._weight = theta * self._weight + (1 - theta)
        self.updates += 1

    @property
    def stats(self) -> GradStats | None:
        """Bias-corrected estimates (unfloored), None before the first update."""
        if self._weight <= 0:
            return None
        return GradStats(sqr=self._sqr / self._weight, var=self._var / self._weight)

    def state_dict(self) -> dict[str, Any]:
        return {"sqr": self._sqr, "var": self._var, "weight": self._weight,
                "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._sqr = float(state["sqr"])
        self._var = float(state["var"])
        self._weight = float(state["weight"])
        self.updates = int(state.get("updates", 0))
