"""The stop request: SIGTERM sets a flag; training acts on it at the next step boundary.

Executors resize or preempt a job by sending SIGTERM to every worker (Pollux (OSDI'21) §4.2;
SideCar (SC'20) §III-B-4). The handler only records the request; the workers agree on it at the
next optimizer step (the flag travels in the gradient all-reduce) and checkpoint there.
Torch-free.
"""

from __future__ import annotations

import signal
import time

__all__ = ["StopSignal"]


class StopSignal:
    """Records SIGTERM (or another signal) instead of dying on it."""

    def __init__(self) -> None:
        self.requested = False
        self.received_at: float | None = None  # wall-clock time of the first request

    def install(self, signum: int = signal.SIGTERM) -> StopSignal:
        signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        if not self.requested:
            self.received_at = time.time()
        self.requested = True
