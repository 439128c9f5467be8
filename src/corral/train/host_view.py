"""A host copy of a few device scalars that never makes the host wait for the device.

Every `period` steps the view takes the values it copied `period` steps ago (waiting only if
the device is that far behind) and starts a new non-blocking copy into pinned memory: the host
reads figures `period` to `2 * period` steps old and keeps queueing ahead of the GPU. The
schedule depends on the step count alone, so every worker sees the same values at the same
step and decisions on them stay agreed. On the CPU the same schedule uses plain copies.
"""

from __future__ import annotations

import torch

__all__ = ["LaggedHostView"]


class LaggedHostView:
    """Lagged host values of a device vector; `refresh(step, vector)` once per step."""

    def __init__(self, size: int, device: torch.device, period: int = 8) -> None:
        if period < 1:
            raise ValueError("period must be at least 1 step")
        self.period = period
        self.values: list[float] | None = None  # None until the first copy arrives
        self._cuda = device.type == "cuda"
        self._buffer = torch.zeros(size, dtype=torch.float64, pin_memory=self._cuda)
        self._event = torch.cuda.Event() if self._cuda else None
        self._pending = False

    def refresh(self, step: int, vector: torch.Tensor) -> bool:
        """At every `period`-th step: publish the previous copy, start the next. True when
        `values` changed."""
        if step % self.period:
            return False
        published = self._publish()
        self._buffer.copy_(vector.detach().double(), non_blocking=self._cuda)
        if self._event is not None:
            self._event.record()
        self._pending = True
        return published

    def _publish(self) -> bool:
        if not self._pending:
            return False
        if self._event is not None:
            self._event.synchronize()  # long done unless the GPU is `period` steps behind
        self.values = self._buffer.tolist()
        self._pending = False
        return True

    def reset(self) -> None:
        """Drop any copy in flight and the published values (after a restore)."""
        if self._event is not None and self._pending:
            self._event.synchronize()
        self._pending = False
        self.values = None
