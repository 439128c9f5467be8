"""`Runtime`: what the live service runs on: an executor, the clock the service keeps its time
by, and the check each submission passes before it is stored.

Most executors run any command on wall-clock time (the defaults); the emulated executor runs
the simulator's jobs, on its own clock, and knows only its truth's models
(`corral.executors.emulated.executor.emulated_runtime`). `ExecutorRegistry`: runtimes by name
(the built-in ones: corral.executors.EXECUTORS).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.core.clock import WALL_CLOCK, Clock
from corral.core.errors import InputError
from corral.executors.base import Executor

__all__ = ["Runtime", "ExecutorRegistry", "any_app"]


def any_app(app: str | None) -> None:
    """The submission check of executors that run commands: every model will do."""


@dataclass(frozen=True)
class Runtime:
    executor: Executor
    clock: Clock = WALL_CLOCK
    #: raises a CorralError (one line) when the executor cannot run a job of model `app`
    check_app: Callable[[str | None], None] = any_app


@dataclass(frozen=True)
class ExecutorRegistry:
    """Executors by name, each a function `(data_dir, **options) -> Runtime`."""

    makers: Mapping[str, Callable[..., Runtime]]

    def names(self) -> list[str]:
        return sorted(self.makers)

    def create(self, name: str, data_dir: str | Path, **options: Any) -> Runtime:
        """The executor `name` on `data_dir`, with its clock and submission check."""
        try:
            make = self.makers[name]
        except KeyError:
            raise InputError(f"unknown executor {name!r}; known: {', '.join(self.names())}") from None
        return make(data_dir, **options)
