"""Executors: what starts, resizes and stops jobs' workers (contract in corral.executors.base).

`EXECUTORS` is the registry of the built-in ones: each name builds a `Runtime` (the executor,
the clock the service keeps its time by, its check of each submission) on a data directory, and
imports its module only then (so Ray is imported only when used). The CLI hands the registry to
the service (`ServeOptions.executors`), which imports no executor (nor this package: the
emulated executor imports the simulator, which the service must not).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corral.executors.base import ExecState, ExecStatus, Executor, JobLaunch, WorkerPlan
from corral.executors.runtime import ExecutorRegistry, Runtime

__all__ = ["Runtime", "Executor", "ExecState", "ExecStatus", "JobLaunch", "WorkerPlan",
           "ExecutorRegistry", "EXECUTORS", "create_runtime", "create_executor",
           "executor_names"]


def _local(data_dir: str | Path, **options: Any) -> Runtime:
    from corral.executors.local import LocalExecutor

    return Runtime(LocalExecutor(data_dir, **options))


def _ray(data_dir: str | Path, **options: Any) -> Runtime:
    from corral.executors.ray.executor import RayExecutor

    return Runtime(RayExecutor(data_dir, **options))


def _emulated(data_dir: str | Path, **options: Any) -> Runtime:
    from corral.executors.emulated.executor import emulated_runtime

    return emulated_runtime(data_dir, **options)


#: the built-in executors
EXECUTORS = ExecutorRegistry({"local": _local, "ray": _ray, "emulated": _emulated})


def executor_names() -> list[str]:
    return EXECUTORS.names()


def create_runtime(name: str, data_dir: str | Path, **options: Any) -> Runtime:
    """A built-in executor by name, with its clock and submission check."""
    return EXECUTORS.create(name, data_dir, **options)


def create_executor(name: str, data_dir: str | Path, **options: Any) -> Executor:
    return create_runtime(name, data_dir, **options).executor
