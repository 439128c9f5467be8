"""Divergence detection on the training device: a loss that is not finite, has exploded, or has
climbed back to where training started.

Each host-view period's mean loss updates, on the device, a bias-corrected running mean (~10
periods), its lowest value and the mean of the first `warmup`. DIVERGED (corral.train.
grad_stats) is set by a non-finite loss, or after warm-up when the running mean exceeds both
`factor` x its lowest and half the starting level (`factor=None`: finiteness only).
`healthy()`, at epoch ends: the mean within sqrt(`factor`) x its lowest, a state worth going
back to (a too-high rate slides for epochs before the threshold trips).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from corral.train.grad_stats import DIVERGED

__all__ = ["DivergenceGuard", "DEFAULT_EXPLODE_FACTOR"]

DEFAULT_EXPLODE_FACTOR = 10.0
_MEAN, _LOWEST, _START, _SEEN = 0, 1, 2, 3


class DivergenceGuard:
    """Running loss mean, its lowest value, the starting level and the divergence flag."""

    def __init__(self, device: torch.device, factor: float | None = DEFAULT_EXPLODE_FACTOR,
                 warmup: int = 5, smoothing: float = 0.9) -> None:
        self.factor = factor
        self.warmup = warmup
        self.smoothing = smoothing
        self._state = torch.tensor([0.0, float("inf"), 0.0, 0.0], dtype=torch.float64,
                                   device=device)

    def observe(self, loss: torch.Tensor, flags: torch.Tensor) -> None:
        """Check one loss (a period's mean); sets flags[DIVERGED] when it diverged."""
        value = loss.detach().double()
        st = self._state
        finite = torch.isfinite(value)
        seen = st[_SEEN]
        beta = self.smoothing
        mean = (beta * st[_MEAN] * (1 - beta ** seen) + (1 - beta) * value) / (
            1 - beta ** (seen + 1))
        warm = seen >= self.warmup
        bad = ~finite
        if self.factor is not None:
            bad = bad | (warm & (mean > self.factor * st[_LOWEST]) & (mean > 0.5 * st[_START]))
        lowest = torch.where(warm, torch.minimum(st[_LOWEST], mean), st[_LOWEST])
        start = torch.where(warm, st[_START], (st[_START] * seen + value) / (seen + 1))
        new = torch.stack([mean, lowest, start, seen + 1])
        st.copy_(torch.where(finite & ~bad, new, st))
        flags[DIVERGED] = torch.maximum(flags[DIVERGED], bad.to(flags.dtype))

    def healthy(self) -> bool:
        """Whether the running loss is near its lowest (or still warming up): a state a
        divergence may go back to. Reads the device (epoch ends only)."""
        mean, lowest, _, seen = self._state.tolist()
        if self.factor is None or seen <= self.warmup:
            return True
        return mean <= math.sqrt(self.factor) * lowest

    def state_dict(self) -> dict[str, Any]:
        mean, lowest, start, seen = self._state.tolist()
        return {"mean": mean, "lowest": lowest, "start": start, "seen": seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "lowest" in state:
            self._state.copy_(torch.tensor([state["mean"], state["lowest"], state["start"],
                                            state["seen"]], dtype=torch.float64))
