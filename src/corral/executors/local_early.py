"""Early initialisation on the local executor (sequence: corral.executors.early): its slots are
the slot pool's, its worker sets processes.

A donor gives up, on each node, its highest ranks' slots beyond what its target keeps there (as
an in-place shrink frees them); the incoming job takes the free slots at once and is promised
the donors' (`SlotPool.promise`), which pass to it when the donors' workers are gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from corral.executors.base import ExecState
from corral.executors.early import EarlyStart, plan_slots
from corral.executors.procs import end_launch, free_port, new_launch_tag, signal_group
from corral.protocol.early import ENV_EARLY_START

if TYPE_CHECKING:
    from corral.executors.local import LocalWorkers, _Job

__all__ = ["EarlyProcs", "LocalEarlySlots"]


@dataclass(kw_only=True)
class EarlyProcs(EarlyStart):
    """An early start's worker processes: rank r on `slots[r]`, with its log."""

    port: int
    tag: str
    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)


class LocalEarlySlots:
    """The local backend's side of early starts (`corral.executors.early.EarlySlots`)."""

    def __init__(self, ex: LocalWorkers) -> None:
        self.ex = ex

    def _gives_up(self, d: _Job) -> dict[int, list[int]]:
        """The slots running job `d` was told to give up and still holds, by node: on each
        node, its highest ranks' beyond what its target keeps there."""
        if d.state is not ExecState.RUNNING or not d.procs or d.resize is not None:
            return {}
        pool = self.ex.pool
        keep = self.ex.per_node(d.target.placement) if d.target is not None else {}
        out: dict[int, list[int]] = {}
        for node in {pool.node[s] for s in d.slots}:
            held = [s for s in d.slots if pool.node[s] == node]
            if len(held) > keep.get(node, 0):
                out[node] = held[keep.get(node, 0):]
        return out

    def _donor_slots(self) -> dict[str, dict[int, list[int]]]:
        """Running jobs that give slots up and are not let go yet: the slots each gives up
        that nobody was promised, by node."""
        early = self.ex.table.early
        assert early is not None  # (asked by its sequence only)
        promised, donors = early.open_donors()
        found: dict[str, dict[int, list[int]]] = {}
        for d in donors:
            slots = {node: left for node, held in self._gives_up(d).items()
                     if (left := [s for s in held if s not in promised])}
            if slots:
                found[d.launch.job_id] = slots
        return found

    def plan(self, j: _Job) -> tuple[list[int], dict[str, list[int]]] | None:
        if not os.path.isdir(j.launch.cwd):
            return None  # its normal start fails it with the reason
        assert j.target is not None
        need = self.ex.per_node(j.target.placement)
        return plan_slots(need, {n: self.ex.pool.free(j.launch.job_id, n) for n in need},
                          self._donor_slots())

    def record(self, j: _Job, generation: int, free: list[int],
               donors: dict[str, list[int]]) -> EarlyProcs:
        job_id, pool = j.launch.job_id, self.ex.pool
        promised = [s for slots in donors.values() for s in slots]
        pool.acquire(job_id, len(free), free)
        pool.promise(job_id, promised)
        return EarlyProcs(j.target, generation, sorted(free + promised), donors,
                          port=free_port(), tag=new_launch_tag(job_id))

    def start(self, j: _Job) -> str | None:
        e = j.early
        assert e is not None
        try:
            self.ex.spawn_set(j, e.target, e.slots, e.port, e.tag, e.procs, e.logs,
                                 {ENV_EARLY_START: str(e.generation)})
        except (OSError, ValueError) as exc:
            return str(exc)
        return None

    def failure(self, j: _Job) -> str | None:
        assert j.early is not None
        codes = [p.poll() for p in j.early.procs]
        if any(c is not None for c in codes):
            return f"a worker exited (statuses {codes}) before it was ready"
        return None

    def donor_keeps(self, d: _Job, slots: Sequence[int]) -> bool:
        return (d.state is ExecState.RUNNING and d.resize is None and d.target is not None
                and not self._gives_up(d) and bool(set(slots) & set(d.slots)))

    def handed_over(self, j: _Job) -> bool:
        pool = self.ex.pool
        return set(pool.promised(j.launch.job_id)) <= set(pool.free(j.launch.job_id))

    def take(self, j: _Job, e: EarlyStart) -> None:
        assert isinstance(e, EarlyProcs)
        pool = self.ex.pool
        promised = pool.promised(j.launch.job_id)
        pool.acquire(j.launch.job_id, len(promised), promised)
        j.procs, j.logs, j.slots, j.tag, j.plan = e.procs, e.logs, e.slots, e.tag, e.target

    def drop(self, j: _Job) -> None:
        """End the early workers; free the slots the job held for them and its promises."""
        e, j.early = j.early, None
        assert e is not None
        job_id, pool = j.launch.job_id, self.ex.pool
        pool.withdraw(job_id)
        pool.release(job_id)  # a queued job holds only its early workers' slots
        j.prefer = e.slots
        for p in e.procs:
            signal_group(p.pid, signal.SIGKILL)
        end_launch(e.tag)
        for p in e.procs:
            if p.poll() is None:
                p.wait(timeout=5)
        for f in e.logs:
            f.close()
