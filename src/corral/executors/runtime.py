"""`Runtime`: what the live service runs on: an executor, the clock the service keeps its time
by, the check each submission passes before it is stored, and a new job's one-GPU profiles.

Most executors run any command on wall-clock time and profile nothing (the defaults); the
emulated executor runs the simulator's jobs, on its own clock, knows only its truth's models
and profiles a job as the simulator does
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
from corral.core.jobs import JobSpec
from corral.executors.base import Executor

__all__ = ["Runtime", "ExecutorRegistry", "any_app", "no_profile", "Profiler"]

#: a new job's one-GPU profile on each GPU type it may use, {type: (step time, per-GPU batch)}
Profiler = Callable[[JobSpec], dict[str, tuple[float, int]]]


def any_app(app: str | None) -> None:
    """The submission check of executors that run commands: every model will do."""


def no_profile(spec: JobSpec) -> dict[str, tuple[float, int]]:
    """The profiler of executors that run commands: none can profile a job before it runs."""
    return {}


@dataclass(frozen=True)
class Runtime:
    executor: Executor
    clock: Clock = WALL_CLOCK
    #: raises a CorralError (one line) when the executor cannot run a job of model `app`
    check_app: Callable[[str | None], None] = any_app
    #: a new job's profiles (Sia (SOSP'23) §4), taken before it is first scheduled; the
    #: service seeds the job's estimator with them on a cluster of several types
    profile: Profiler = no_profile


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
