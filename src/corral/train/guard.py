"""Divergence detection on the training device: a loss that is not finite or has exploded.

Each micro-batch's loss is compared, on the device, with a running mean of the finite losses
seen before it: a non-finite loss, or one above `factor` x that mean once `warmup` losses have
been seen, sets the divergence flag (corral.train.grad_stats.DIVERGED). The flag travels with
the gradients (several workers agree on it) and reaches the host through the lagged host view;
the trainer then restores the last good checkpoint and returns to the initial batch. No host
synchronisation per step. `factor=None` checks finiteness only.
"""

from __future__ import annotations

from typing import Any

import torch

from corral.train.grad_stats import DIVERGED

__all__ = ["DivergenceGuard", "DEFAULT_EXPLODE_FACTOR"]

DEFAULT_EXPLODE_FACTOR = 10.0


class DivergenceGuard:
    """Running loss mean and the divergence flag, on the device."""

    def __init__(self, device: torch.device, factor: float | None = DEFAULT_EXPLODE_FACTOR,
                 warmup: int = 20, smoothing: float = 0.98) -> None:
        self.factor = factor
        self.warmup = warmup
        self.smoothing = smoothing
        self._mean = torch.zeros((), dtype=torch.float64, device=device)
        self._seen = torch.zeros((), dtype=torch.float64, device=device)

    def observe(self, loss: torch.Tensor, flags: torch.Tensor) -> None:
        """Check one micro-batch's loss; sets flags[DIVERGED] when it diverged."""
        value = loss.detach().double()
        finite = torch.isfinite(value)
        bad = ~finite
        if self.factor is not None:
            exploded = (self._seen >= self.warmup) & (self._mean > 0) & (
                value > self.factor * self._mean)
            bad = bad | exploded
        flags[DIVERGED] = torch.maximum(flags[DIVERGED], bad.to(flags.dtype))
        good = ~bad
        beta = torch.where(self._seen > 0, self.smoothing, 0.0)
        self._mean.copy_(torch.where(good, beta * self._mean + (1 - beta) * value, self._mean))
        self._seen.add_(good.double())

    def state_dict(self) -> dict[str, Any]:
        return {"mean": float(self._mean), "seen": float(self._seen)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._mean.fill_(float(state.get("mean", 0.0)))
        self._seen.fill_(float(state.get("seen", 0.0)))
