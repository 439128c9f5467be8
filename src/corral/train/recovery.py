"""Where a diverged job goes back to, and when to give up.

The last good state is that of the last epoch end the divergence guard called healthy
(corral.train.guard): the checkpoint marked good (corral.train.checkpoint) or, without a
checkpoint directory, an in-memory copy; the last epoch end may already be far down a slow
slide. Without a mark, the newest checkpoint that loads. More than `max_in_a_row` restores
without a finished epoch fail the job with `TrainingDiverged`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.train.checkpoint import CheckpointStore
from corral.train.host_copy import HostCopy, to_cpu

__all__ = ["LastGoodState", "TrainingDiverged", "MAX_RESTORES_IN_A_ROW"]

MAX_RESTORES_IN_A_ROW = 3


class TrainingDiverged(RuntimeError):
    """The loss kept diverging after restoring the last good state."""


class LastGoodState:
    """The state a divergence rolls back to."""

    def __init__(self, store: CheckpointStore | None,
                 max_in_a_row: int = MAX_RESTORES_IN_A_ROW) -> None:
        self.store = store
        self.max_in_a_row = max_in_a_row
        self.in_a_row = 0
        self._memory: HostCopy | None = None

    def keep(self, state: Callable[[], HostCopy], healthy: bool,
             saved: Path | None = None) -> None:
        """At an epoch end: when `healthy`, this state becomes the one to go back to (the
        checkpoint `saved` now, or, when there is no checkpoint directory, the copy in host
        memory that `state()` gives, taken without waiting for the GPU)."""
        self.in_a_row = 0
        if not healthy:
            return
        if self.store is None:
            self._memory = state()
        elif saved is not None:
            self.store.mark_good(saved)

    def take(self, why: str, at: str) -> tuple[dict[str, Any], str]:
        """(state, where it came from) to go back to; raises when restores keep failing."""
        self.in_a_row += 1
        if self.in_a_row > self.max_in_a_row:
            raise TrainingDiverged(f"{why} at {at} again after {self.max_in_a_row} restores of "
                                   "the last good state; lower the learning rate")
        loaded = self.store.load_good() if self.store is not None else None
        if loaded is not None:
            return loaded[0], f"checkpoint {loaded[1].name}"
        if self._memory is not None:  # a copy: optimizer.load_state_dict keeps the tensors it
            # is given (SGD's momentum buffers), which the next steps update in place
            return to_cpu(self._memory.result()), "the state at the last healthy epoch end"
        raise TrainingDiverged(f"{why} at {at}, before any good state was saved; lower the "
                               "learning rate or the batch size")
