"""`Clock`: the time the live service keeps (job times, rounds, report times), as a clock object
the control loop is given, and the instant in which one look of the loop at its jobs happens.

Wall-clock time by default; the emulated executor's clock (corral.executors.emulated.clock)
runs N times faster and stands still during an instant, so that a round is decided and applied
at one instant, as in the simulator, whatever its real time; its lock-step variant moves only
between the loop's ticks (`Clock.pace`), so a scripted emulation gives the same answer however
loaded the machine is.
"""

from __future__ import annotations

import contextlib
import threading
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

    def pace(self, stop: threading.Event, tick_s: float) -> None:
        """Between two ticks of the control loop: wait `tick_s` real seconds (or until `stop`).
        A clock that moves only when told (the emulated executor's `LockstepClock`) moves here
        instead, so the loop looks at every moment it steps to."""
        stop.wait(tick_s)


WALL_CLOCK = Clock()
