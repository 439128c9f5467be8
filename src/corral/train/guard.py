"""Divergence detection on the training device: a loss that is not finite or has exploded.

Each micro-batch's loss updates, on the device, a fast running mean (about the last 10
losses), a slow one (about the last 1,000) and, over the first `warmup` losses, the level the
job started from. The divergence flag (corral.train.grad_stats.DIVERGED) is set by a non-finite
loss, or, after the warm-up, when the fast mean (this loss included) exceeds `factor` x the
slow mean before it *and* half the starting level: a model that climbs back towards where it started (the collapse to chance
accuracy seen live) or beyond. A single noisy micro-batch does not trip it, and neither do the
relative swings of a loss near zero late in training (0.02 -> 0.25 is not a divergence).

The flag travels with the gradients (several workers agree on it) and reaches the host through
the lagged host view; the trainer then restores the last good state and returns to the initial
batch. No host synchronisation per step. `factor=None` checks finiteness only.
"""

from __future__ import annotations

from typing import Any

import torch

from corral.train.grad_stats import DIVERGED

__all__ = ["DivergenceGuard", "DEFAULT_EXPLODE_FACTOR"]

DEFAULT_EXPLODE_FACTOR = 10.0
_FAST, _SLOW, _START, _SEEN = 0, 1, 2, 3


class DivergenceGuard:
    """Running loss means and the divergence flag, on the device."""

    def __init__(self, device: torch.device, factor: float | None = DEFAULT_EXPLODE_FACTOR,
                 warmup: int = 20, fast: float = 0.9, slow: float = 0.999) -> None:
        self.factor = factor
        self.warmup = warmup
        self._betas = torch.tensor([fast, slow], dtype=torch.float64, device=device)
        self._state = torch.zeros(4, dtype=torch.float64, device=device)  # fast, slow, start, n

    def observe(self, loss: torch.Tensor, flags: torch.Tensor) -> None:
        """Check one micro-batch's loss; sets flags[DIVERGED] when it diverged."""
        value = loss.detach().double()
        st = self._state
        finite = torch.isfinite(value)
        seen = st[_SEEN]
        betas = torch.where(seen > 0, self._betas, 0.0)
        means = betas * st[_FAST:_START] + (1 - betas) * value
        bad = ~finite
        if self.factor is not None:
            bad = bad | ((seen >= self.warmup) & (means[0] > self.factor * st[_SLOW])
                         & (means[0] > 0.5 * st[_START]))
        start = torch.where(seen < self.warmup, (st[_START] * seen + value) / (seen + 1),
                            st[_START])
        new = torch.cat([means, start.view(1), (seen + 1).view(1)])
        st.copy_(torch.where(finite, new, st))
        flags[DIVERGED] = torch.maximum(flags[DIVERGED], bad.to(flags.dtype))

    def state_dict(self) -> dict[str, Any]:
        fast, slow, start, seen = self._state.tolist()
        return {"fast": fast, "slow": slow, "start": start, "seen": seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "fast" in state:
            self._state.copy_(torch.tensor([state["fast"], state["slow"], state["start"],
                                            state["seen"]], dtype=torch.float64))
