"""`Clock`: the time the live service keeps (job times, rounds, report times), as a clock object
the control loop is given, and the instant in which one look of the loop at its jobs happens.

Wall-clock time by default; the emulated executor's clock (corral.executors.emulated.clock)
runs N times faster and stands still during an instant, so that a round is decided and applied
at one instant, as in the simulator, whatever its real time; its lock-step variant moves only
between the loop's ticks (`Clock.pace`), from one moment the loop acts on to the next, so a
scripted emulation gives the same answer however loaded the machine is.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
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

    def pace(self, stop: threading.Event, tick_s: float,
             until: Callable[[], float] | None = None) -> float:
        """Between two ticks of the control loop: wait `tick_s` real seconds (or until `stop`).
        A clock that moves only when told (the emulated executor's `LockstepClock`) moves here
        instead, to the next moment at which its jobs changed or the loop's own next moment
        comes (`until()`: its next round or arrival, a reading of this clock), so the loop
        looks at every moment it would act on. Returns the seconds it moved through before
        the last moment at which anything could change (all but the last step of such a
        clock; 0 here: on a clock that runs on, anything may change at any time)."""
        stop.wait(tick_s)
        return 0.0


WALL_CLOCK = Clock()
