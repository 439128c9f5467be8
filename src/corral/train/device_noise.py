"""corral.train.noise's smoothed gradient-noise estimate, kept on the training device and
brought up to date only when someone reads it.

A step hands over its squared norms (`record`: device scalars, nothing computed); `ema` folds
every step since the last read into the bias-corrected EMA in a few vector operations, so the
per-step cost is a list append, not a dozen small device operations. The fold is the per-step
recursion in closed form: a non-finite estimate (an fp16 step with inf/NaN gradients) is
skipped; each other step multiplies the EMA by theta = smoothing ** scale and adds (1 - theta)
times its estimate, folded in runs of equal (count, scale).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from corral.train.noise import DEFAULT_SMOOTHING, estimate

__all__ = ["DeviceNoise"]


class DeviceNoise:
    """The smoothed (|g|^2, var) of corral.train.noise.GradNoise, on `device`, folded lazily."""

    def __init__(self, device: torch.device, smoothing: float = DEFAULT_SMOOTHING) -> None:
        self.smoothing = smoothing
        self._ema = torch.zeros(3, dtype=torch.float64, device=device)  # sqr, var, weight
        self.updates = 0
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._run: tuple | None = None  # (count, scale, dtypes) of the pending steps

    def record(self, local_sum: torch.Tensor, total_sqr: torch.Tensor, count: int,
               scale: float) -> None:
        """One step's samples: `count` gradients, the sum of their squared norms
        (`local_sum`) and the squared norm of their mean (`total_sqr`), at combined scale
        `scale`. Folded into the estimate when it is next read."""
        run = (count, scale, local_sum.dtype, total_sqr.dtype)  # stacked together when folded
        if self._run != run:
            self.fold()
            self._run = run
        self._pending.append((local_sum, total_sqr))
        self.updates += 1

    def update(self, local_sqr: Any, total_sqr: Any, count: int, scale: float) -> None:
        """One step from the mean of the samples' squared norms (`local_sqr`), as
        corral.train.noise.GradNoise.update, folded at once (floats or device scalars)."""
        dev = self._ema.device
        self.record(torch.as_tensor(local_sqr, dtype=torch.float64, device=dev) * count,
                    torch.as_tensor(total_sqr, dtype=torch.float64, device=dev), count, scale)
        self.fold()

    @property
    def ema(self) -> torch.Tensor:
        """[sqr, var, weight] with every recorded step folded in (bias correction: divide the
        first two by the weight)."""
        self.fold()
        return self._ema

    def fold(self) -> None:
        """Fold the pending steps into the EMA (device work only: no host read)."""
        if not self._pending:
            return
        assert self._run is not None  # (set with the pending steps)
        count, scale = self._run[:2]
        local = torch.stack([p[0] for p in self._pending]).double() / count
        total = torch.stack([p[1] for p in self._pending]).double()
        self._pending.clear()
        sqr, var = estimate(local, total, count, scale)
        new = torch.stack([sqr, var, torch.ones_like(sqr)])  # 3 x steps
        finite = torch.isfinite(new).all(0)
        theta = self.smoothing ** scale
        # theta ** (finite steps after each one): how much of each step survives to the end
        later = finite.flip(0).double().cumsum(0).flip(0) - finite.double()
        weight = torch.where(finite, (1 - theta) * theta ** later, 0.0)
        kept = theta ** finite.double().sum()
        self._ema.mul_(kept).add_((torch.where(finite, new, 0.0) * weight).sum(1))

    @staticmethod
    def stats_from(values: Sequence[float]) -> tuple[float, float] | None:
        """(|g|^2, var) from the EMA's three values, None before the first update."""
        sqr, var, weight = values[0], values[1], values[2]
        return None if weight <= 0 else (sqr / weight, var / weight)

    def values(self) -> list[float]:
        """The EMA read to the host (a synchronisation)."""
        return [float(v) for v in self.ema.tolist()]

    def state_dict(self) -> dict[str, Any]:  # GradNoise's format: checkpoints stay compatible
        sqr, var, weight = self.values()
        return {"sqr": sqr, "var": var, "weight": weight, "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._pending.clear()
        self._ema.copy_(torch.tensor([float(state["sqr"]), float(state["var"]),
                                      float(state["weight"])], dtype=torch.float64))
        self.updates = int(state.get("updates", 0))
