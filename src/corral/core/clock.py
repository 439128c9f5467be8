"""`Clock`: the time the live service keeps (job times, rounds, report times), as a clock object
the control loop is given, and the instant in which one look of the loop at its jobs happens.

Wall-clock time by default; the emulated executor's clock (corral.executors.emulated.clock)
runs N times faster and stands still during an instant, so that a round is decided and applied
at one instant, as in the simulator, whatever its real time.
"""

from __future__ import annotations

import contextlib
import time
from contextlib import AbstractContextManager

__all__ = ["Clock", "WALL_CLOCK"]


class Clock:
    """Seconds since the Unix epoch: wall-clock time, running on during an instant."""

    def __call__(self) -> float:
        return time.time()

    def instant(self) -> AbstractContextManager[None]:
        """A context around one tick of the control loop (statuses, reports, a round's
        decision and its application). Here time runs on."""
        return contextlib.nullcontext()


WALL_CLOCK = Clock()
