"""Executors: what starts, resizes and stops jobs' workers (contract in corral.executors.base).

`create_executor(name, data_dir, **options)` builds one by name; the local executor is the
embedded default, others (Ray) register here by module path so that their dependencies are
imported only when used. `create_backend` builds the same with what the service takes from it
(`Backend`: the clock it keeps its time by, its check of each submission).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from corral.core.errors import InputError
from corral.executors.backend import Backend
from corral.executors.base import ExecState, ExecStatus, Executor, JobLaunch, WorkerPlan

__all__ = ["Backend", "Executor", "ExecState", "ExecStatus", "JobLaunch", "WorkerPlan",
           "create_backend", "create_executor", "executor_names", "EXECUTORS", "BACKENDS"]

#: name -> "module:Class"
EXECUTORS: dict[str, str] = {
    "local": "corral.executors.local:LocalExecutor",
    "ray": "corral.executors.ray.executor:RayExecutor",
    "emulated": "corral.executors.emulated.executor:EmulatedExecutor",
}


#: name -> "module:function" returning a `Backend`, for executors that bring more than the
#: defaults (a clock of their own, a submission check)
BACKENDS: dict[str, str] = {
    "emulated": "corral.executors.emulated.executor:emulated_backend",
}


def executor_names() -> list[str]:
    return sorted(EXECUTORS)


def create_executor(name: str, data_dir: str | Path, **options: Any) -> Executor:
    return create_backend(name, data_dir, **options).executor


def create_backend(name: str, data_dir: str | Path, **options: Any) -> Backend:
    """The executor `name` on `data_dir`, with its clock and submission check."""
    try:
        target = BACKENDS.get(name) or EXECUTORS[name]
    except KeyError:
        raise InputError(f"unknown executor {name!r}; known: {', '.join(executor_names())}") from None
    module, attr = target.split(":")
    made = getattr(importlib.import_module(module), attr)(data_dir, **options)
    return made if isinstance(made, Backend) else Backend(made)
