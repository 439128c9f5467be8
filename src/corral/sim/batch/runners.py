"""Where a sweep's simulations run: in this process, in worker processes, or as Ray tasks.

A runner takes independent tasks (a picklable function and arguments) and yields (index,
outcome) as each finishes. `SerialRunner` (`--jobs 1`); `ProcessRunner` (`--jobs N`, `spawn`,
so no parent thread or lock is copied); `RayRunner` (`--ray-address`, one CPU per task, each
distinct argument put in the object store once; Ray imported only here). Task functions must
not raise (`corral.sim.batch.sweep.run_cell` wraps them), so one failure loses no others.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Protocol

Task = tuple[Callable[..., Any], tuple[Any, ...]]


class Runner(Protocol):
    """Runs tasks; yields (task index, return value) as each finishes."""

    def run(self, tasks: Sequence[Task]) -> Iterator[tuple[int, Any]]:
        ...


class SerialRunner:
    """Every task in this process, in order."""

    def run(self, tasks: Sequence[Task]) -> Iterator[tuple[int, Any]]:
        for i, (fn, args) in enumerate(tasks):
            yield i, fn(*args)


class ProcessRunner:
    """Tasks in `workers` spawned processes (never more than there are tasks)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers

    def run(self, tasks: Sequence[Task]) -> Iterator[tuple[int, Any]]:
        if not tasks:
            return
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(self.workers, len(tasks)), mp_context=ctx) as pool:
            pending = {pool.submit(fn, *args): i for i, (fn, args) in enumerate(tasks)}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield pending.pop(future), future.result()


class RayRunner:
    """Tasks as Ray tasks (one CPU each) on the Ray cluster at `address`.

    Connects through `corral.ray_connect.connect` (an unreachable address is a one-line
    error at once; a cluster on this machine's loopback is reached there) unless this process
    is already connected (then the existing connection is used and left open); a connection it
    opened is closed at the end.
    """

    def __init__(self, address: str | None) -> None:
        self.address = address

    def run(self, tasks: Sequence[Task]) -> Iterator[tuple[int, Any]]:
        import ray

        from corral.ray_connect import connect

        opened = connect(self.address)
        try:
            refs = _put_shared(ray, tasks)
            remote: dict[Callable, Any] = {}
            pending = {}
            for i, (fn, args) in enumerate(tasks):
                if fn not in remote:
                    remote[fn] = ray.remote(num_cpus=1, max_retries=0)(fn)
                pending[remote[fn].remote(*[refs.get(id(a), a) for a in args])] = i
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    yield pending.pop(ref), ray.get(ref)
        finally:
            if opened:
                ray.shutdown()


def _put_shared(ray: Any, tasks: Sequence[Task]) -> dict[int, Any]:
    """Object refs for arguments that several tasks share (by identity), put once each."""
    seen: dict[int, int] = {}
    objs: dict[int, Any] = {}
    for _, args in tasks:
        for a in args:
            if not isinstance(a, (str, int, float, bool, type(None))):
                seen[id(a)] = seen.get(id(a), 0) + 1
                objs[id(a)] = a
    return {key: ray.put(objs[key]) for key, n in seen.items() if n > 1}
