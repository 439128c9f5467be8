"""`Backend`: what the live service runs on: an executor, the clock the service keeps its time
by, and the check each submission passes before it is stored.

Most executors run any command on wall-clock time (the defaults); the emulated executor runs
the simulator's jobs, on its own clock, and knows only its truth's models
(`corral.executors.emulated.executor.emulated_backend`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from corral.core.clock import WALL_CLOCK, Clock
from corral.executors.base import Executor

__all__ = ["Backend", "any_app"]


def any_app(app: str | None) -> None:
    """The submission check of executors that run commands: every model will do."""


@dataclass(frozen=True)
class Backend:
    executor: Executor
    clock: Clock = WALL_CLOCK
    #: raises a CorralError (one line) when the executor cannot run a job of model `app`
    check_app: Callable[[str | None], None] = any_app
