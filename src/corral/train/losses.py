"""The training loss, kept on the device until a report or checkpoint reads its mean.

Every micro-batch's loss is appended as a detached device tensor (no host synchronisation);
once per host-view period the pending ones are summed, the divergence guard looks at their
mean, and the sum joins the report's running total. A report reads the mean since the last
report (one synchronisation) and starts a new one.
"""

from __future__ import annotations

import torch

from corral.train.guard import DivergenceGuard

__all__ = ["LossTally"]


class LossTally:
    """Micro-batch losses since the guard last looked, and their total since the last report."""

    def __init__(self, device: torch.device) -> None:
        self._total = torch.zeros((), dtype=torch.float64, device=device)
        self._count = 0
        self._pending: list[torch.Tensor] = []

    def add(self, loss: torch.Tensor) -> None:
        """One micro-batch's loss (no device operation: summed at the next fold)."""
        self._pending.append(loss.detach())

    def fold(self, guard: DivergenceGuard | None = None, flags: torch.Tensor | None = None
             ) -> None:
        """Move the pending losses into the total; with a `guard`, it checks their mean first
        and sets `flags`' divergence slot (a few dozen small device operations, so once per
        host-view period rather than per batch)."""
        pending = self._pending
        if not pending:
            return
        total = torch.stack(pending).sum().double() if len(pending) > 1 else pending[0].double()
        if guard is not None and flags is not None:
            guard.observe(total / len(pending), flags)
        self._total += total
        self._count += len(pending)
        pending.clear()

    def mean(self, reset: bool) -> float | None:
        """The mean loss since the last reset (reads the device), None when none was added;
        with `reset`, the next mean starts afresh."""
        self.fold()
        if not self._count:
            return None
        value = float(self._total) / self._count
        if reset:
            self.clear()
        return value

    def clear(self) -> None:
        """Forget every loss (after a divergence restore, the losses belong to a dropped run)."""
        self._total.zero_()
        self._count = 0
        self._pending.clear()
