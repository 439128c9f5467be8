"""`EmulatedClock`: seconds on a clock that runs N times real time, continued across restarts.

The emulated executor's jobs and the service it is handed to (`corral.core.clock.Clock`) keep
time on it. Stored
job times are on this clock, so a restarted service must find it where it would be now: the
anchor (emulated time, wall-clock time read, scale) is kept in `CLOCK_FILE` in the data
directory, and downtime passes as N times real time, as a real cluster's clock runs on.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from corral.core.clock import Clock
from corral.core.errors import InputError
from corral.protocol.files import atomic_write_json, read_json

__all__ = ["EmulatedClock", "LockstepClock", "CLOCK_FILE"]

CLOCK_FILE = "emulated-clock.json"


class EmulatedClock(Clock):
    """Seconds since the Unix epoch on a clock that runs `time_scale` times real time from
    `start` (default: now); monotonic within a process. `world` (the emulated executor's lock)
    is held during an `instant`, so that its jobs stand still with the clock."""

    def __init__(self, time_scale: float, start: float | None = None,
                 world: contextlib.AbstractContextManager | None = None) -> None:
        if not time_scale > 0:
            raise InputError(f"--time-scale must be > 0, got {time_scale}")
        self.time_scale = float(time_scale)
        self.start = time.time() if start is None else float(start)
        self._mono0 = time.monotonic()
        self._wall0 = time.time()
        self._stopped = threading.local()  # .at: the reading while this thread stopped it
        self._world = world if world is not None else contextlib.nullcontext()

    def __call__(self) -> float:
        return self.start + self.elapsed_s()

    def elapsed_s(self) -> float:
        """Emulated seconds since this clock object started."""
        stopped = getattr(self._stopped, "at", None)
        if stopped is not None:
            return stopped
        return self.time_scale * (time.monotonic() - self._mono0)

    @contextlib.contextmanager
    def instant(self) -> Iterator[None]:
        """The clock stands still while the service takes one look and acts on it: a round
        decided and applied at one emulated instant, as the engine does, and as a real service
        nearly does (its decide time in real seconds), instead of its real time passing N
        times faster - at 100x a 50 ms decision started every resize 5 emulated s late. For
        the service's thread only: the jobs wait (`world` is held) and the API stamps a
        submission with the running clock, at its real time."""
        with self._world, self.stopped():
            yield

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """Inside, the clock reads what it read on entry - for this thread; other threads read
        it running - and on exit it reads real time times the scale again (it catches up: time
        is not lost, only what this thread does inside takes none)."""
        if getattr(self._stopped, "at", None) is not None:  # already stopped (re-entered)
            yield
            return
        self._stopped.at = self.elapsed_s()
        try:
            yield
        finally:
            self._stopped.at = None

    @classmethod
    def resumed(cls, data_dir: str | Path, time_scale: float,
                world: contextlib.AbstractContextManager | None = None) -> EmulatedClock:
        """The clock of the emulated service on `data_dir`: the one a previous service there
        left running (its anchor in `CLOCK_FILE`, carried forward by the wall-clock time
        since), or a new one from now; its anchor is written for the next service."""
        path = Path(data_dir) / CLOCK_FILE
        anchor = read_json(path)
        start = None
        try:
            if anchor is not None:
                start = float(anchor["start"]) + float(anchor["time_scale"]) * max(
                    0.0, time.time() - float(anchor["wall"]))
        except (KeyError, TypeError, ValueError):
            start = None  # an unreadable anchor: a new clock, as on a first start
        clock = cls(time_scale, start, world)
        atomic_write_json(path, {"start": clock.start, "wall": clock._wall0,
                                 "time_scale": clock.time_scale})
        return clock


class LockstepClock(EmulatedClock):
    """Emulated time that moves only between the control loop's ticks (`pace`), `step_s` at a
    time, and no faster than `time_scale` times real time: every emulated moment at which the
    loop would find anything new is looked at by exactly one tick, whatever the machine's load,
    so an emulated run (`corral emulate`) is decided at the times the simulator decides it.
    `advance(t)` (the emulated executor's jobs) runs at each step and says whether anything
    the loop reads changed since its last tick (a report, an end, what that tick placed or
    stopped); the steps at which nothing did, and which the loop does not act on by itself
    (`until`: its next round or arrival), have no tick: it would have done nothing there. It starts at a whole second, so steps of
    whole seconds fall on every round's multiple of the interval. Not resumed across restarts:
    a scripted run is one service's life."""

    def __init__(self, time_scale: float, step_s: float = 1.0,
                 world: contextlib.AbstractContextManager | None = None,
                 advance: Callable[[float], bool | None] | None = None) -> None:
        super().__init__(time_scale, float(math.floor(time.time())), world)
        if not step_s > 0:
            raise InputError(f"the lock-step clock's step must be > 0 s, got {step_s}")
        self.step_s = float(step_s)
        self.advance = advance
        self._t = 0.0
        self._due = time.monotonic()  # real time the clock may read `_t` at, at the earliest

    def elapsed_s(self) -> float:
        return self._t

    @contextlib.contextmanager
    def instant(self) -> Iterator[None]:
        with self._world:  # time stands still for every thread here, not only inside ticks
            yield

    def pace(self, stop: threading.Event, tick_s: float,
             until: Callable[[], float] | None = None) -> float:
        """Step to the next moment the loop has anything to look at: step after step, each
        advancing the jobs, up to the first at which `advance` says they changed (None: it
        does not say, so every step is looked at) or at which the loop's own next moment
        (`until()`, a clock reading) has come; one step when `until` is None. The steps are
        the ones the loop looked at one by one before, the jobs advanced in the same steps;
        the ticks left out are those that would have found nothing to do. Then it waits
        until `time_scale` allows that much emulated time (a loaded machine is slower, never
        different). Returns the seconds of all steps but the last, in which nothing the
        loop reads changed (it accounts them by what it saw at its last look)."""
        limit = -math.inf if until is None else until() - self.start
        steps = 0
        with self._world:
            while True:
                self._t += self.step_s
                steps += 1
                changed = self.advance(self._t) if self.advance is not None else None
                if changed is not False or self._t >= limit or stop.is_set():
                    break
        self._due += steps * self.step_s / self.time_scale
        wait = self._due - time.monotonic()
        if wait > 0:
            stop.wait(wait)
        else:
            self._due = time.monotonic()  # behind: do not race to catch up later
        return (steps - 1) * self.step_s
