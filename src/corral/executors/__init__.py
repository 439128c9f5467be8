"""Executors: what starts, resizes and stops jobs' workers (contract in corral.executors.base).

`create_executor(name, data_dir, **options)` builds one by name; the local executor is the
embedded default, others (Ray) register here by module path so that their dependencies are
imported only when used.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from corral.core.errors import InputError
from corral.executors.base import ExecState, ExecStatus, Executor, JobLaunch, WorkerPlan

__all__ = ["Executor", "ExecState", "ExecStatus", "JobLaunch", "WorkerPlan", "create_executor",
           "executor_names", "EXECUTORS"]

#: name -> "module:Class"
EXECUTORS: dict[str, str] = {
    "local": "corral.executors.local:LocalExecutor",
    "ray": "corral.executors.ray.executor:RayExecutor",
    "emulated": "corral.executors.emulated.executor:EmulatedExecutor",
}


def executor_names() -> list[str]:
    return sorted(EXECUTORS)


def create_executor(name: str, data_dir: str | Path, **options: Any) -> Executor:
    try:
        target = EXECUTORS[name]
    except KeyError:
        raise InputError(f"unknown executor {name!r}; known: {', '.join(executor_names())}") from None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)(data_dir, **options)
