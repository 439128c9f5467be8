"""Liveness of a running service, for `/healthz`: does the control loop still go round, and
does the executor's background work?

Each records the (monotonic) time it last finished a round: the loop at the end of every tick
(`ControlLoop.last_round`), the executor at the end of every pass over its jobs
(`Executor.last_round`, None for an executor without background work). A round older than
`stall_after_s` means that part is stuck or dead (a thread that died, a call that hangs), and
the service answers 503 so that a supervisor can restart it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from corral.executors.base import Executor
from corral.service.loop import ControlLoop

__all__ = ["Health"]


class Health:
    """Builds the `/healthz` document."""

    def __init__(self, loop: ControlLoop, executor: Executor, stall_after_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.loop = loop
        self.executor = executor
        self.stall_after_s = stall_after_s
        self.clock = clock

    def check(self) -> dict[str, Any]:
        """{"status": "ok" | "stalled", "loop": {...}, "executor": {...}}; each part gives the
        age of its last round in seconds (null: the part has no rounds) and whether it stalled."""
        now = self.clock()
        parts = {"loop": self.loop.last_round, "executor": self.executor.last_round}
        doc: dict[str, Any] = {}
        stalled = []
        for name, last in parts.items():
            age = None if last is None else round(max(0.0, now - last), 3)
            late = age is not None and age > self.stall_after_s
            doc[name] = {"last_round_age_s": age, "stalled": late}
            if late:
                stalled.append(f"{name}: no round for {age:.0f} s")
        return {"status": "stalled" if stalled else "ok", **doc,
                **({"detail": "; ".join(stalled)} if stalled else {})}
