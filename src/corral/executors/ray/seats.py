"""Early initialisation on Ray (sequence: corral.executors.early; seats and the record of one
under way: corral.executors.ray.early): which seats are free or donated by the executor's books,
and how an early worker set is reserved, started, handed over and dropped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import ray
from ray.exceptions import RayError

from corral.executors.base import ExecState, WorkerPlan
from corral.executors.early import EarlyStart, plan_slots
from corral.executors.lifecycle import lost_note
from corral.executors.ray.early import RayEarlyStart, Seat, leaving_ranks
from corral.executors.ray.launch import (
    LaunchError,
    Target,
    WorkerSet,
    ready,
    remove_groups,
    seat_key,
)
from corral.protocol.early import ENV_EARLY_START

if TYPE_CHECKING:
    from corral.executors.lifecycle import JobTable
    from corral.executors.ray.executor import RayWorkers, _Job

__all__ = ["RayEarlySeats"]


class RayEarlySeats:
    """The Ray backend's side of early starts (`corral.executors.early.EarlySlots`)."""

    def __init__(self, ex: RayWorkers) -> None:
        self.ex = ex  # the backend (launcher, node table); its job table: `table`

    @property
    def table(self) -> JobTable[_Job]:
        return self.ex.table

    def _held_nodes(self, j: _Job) -> Counter[str] | None:
        """How many slots job `j` holds on each node, by the executor's books (None when a
        reservation of it is not tied to nodes yet: a job packed wherever it fits)."""
        held: Counter[str] = Counter()
        for ws in (j.ws, j.resize.joiners if j.resize is not None else None):
            if ws is None:
                continue
            if ws.slots:
                held.update(ws.nodes)
            elif ws.target.nodes is not None:
                held.update(dict(ws.target.nodes))
            else:
                return None
        if j.early is not None:
            held.update(s.node for s in j.early.free)
            held.update(s.node for s in j.early.donated if not self._donor_holds(s))
        return held

    def _free_seats(self) -> dict[str, list[Seat]] | None:
        """Each node's slots that no job of this executor holds, as free seats (None while a
        reservation is not tied to nodes)."""
        held: Counter[str] = Counter()
        for j in self.table.jobs():
            h = self._held_nodes(j)
            if h is None:
                return None
            held.update(h)
        return {n.node_id: [Seat(f"free:{n.node_id}:{i}", n.node_id, f"n{index}")
                            for i in range(max(0, n.slots - held[n.node_id]))]
                for index, n in enumerate(self.ex.node_table.nodes)}

    def _leaving(self, d: _Job) -> list[int]:
        """Ranks of running job `d` whose slots its target gives up (stopped: all of them; a
        target packed wherever it fits: none are known)."""
        if d.ws is None or d.target == d.ws.target:
            return []
        if d.target is None:
            return list(range(len(d.ws.actors)))
        if d.target.nodes is None:
            return []
        new: Counter[str] = Counter()
        for node, count in d.target.nodes:
            new[node] += count
        return leaving_ranks(d.ws.nodes, new)

    def _donated_seat(self, d: _Job, rank: int) -> Seat:
        assert d.ws is not None
        pg, bundle = d.ws.seats[d.ws.slots[rank][0]]
        node = d.ws.nodes[rank]
        index = self.ex.node_table.index_of(node)
        return Seat(seat_key(pg, bundle), node, f"n{index if index is not None else '?'}",
                    d.launch.job_id, rank, pg, bundle, d.ws.waits[rank], d.ws.actors[rank])

    def _donor_seats(self) -> dict[str, dict[str, list[Seat]]]:
        """Running jobs that give slots up and are not let go yet: per node, the seats each
        gives up that nobody was promised (only jobs with a placement group per worker)."""
        assert self.table.early is not None  # (asked by its sequence only)
        promised, donors = self.table.early.open_donors()
        found: dict[str, dict[str, list[Seat]]] = {}
        for d in donors:
            if (d.state is not ExecState.RUNNING or d.ws is None or d.ws.phase != "run"
                    or d.resize is not None or not d.ws.per_worker):
                continue
            for rank in self._leaving(d):
                seat = self._donated_seat(d, rank)
                if seat not in promised:
                    found.setdefault(d.launch.job_id, {}).setdefault(seat.node, []).append(seat)
        return found

    def _donor_holds(self, seat: Seat) -> bool:
        """The donor still has `seat` in its worker set."""
        if seat.donor is None:  # a free seat: no donor
            return False
        d = self.table.job(seat.donor)
        return d is not None and d.ws is not None and seat.key in d.ws.seat_keys()

    def plan(self, j: _Job) -> tuple[list[Seat], dict[str, list[Seat]]] | None:
        assert j.target is not None  # (a queued job with a target: `_plan_starts`)
        if j.target.nodes is None or not self.ex.node_table.still_fits(j.target.nodes):
            return None
        free = self._free_seats()
        if free is None:
            return None
        need: Counter[str] = Counter()
        for node, count in j.target.nodes:
            need[node] += count
        return plan_slots(need, free, self._donor_seats())

    def record(self, j: _Job, generation: int, free: list[Seat],
                      donors: dict[str, list[Seat]]) -> RayEarlyStart:
        donated = [s for seats in donors.values() for s in seats]
        assert j.target is not None
        return RayEarlyStart(j.target, generation, free + donated, donors,
                             ws=WorkerSet(j.target, []),
                             free=free, donated=donated)

    def start(self, j: _Job) -> str | None:
        """Reserve the free seats (placement groups pinned to their nodes) and ask the donors'
        actors for their GPUs; the actors and workers start at the next looks."""
        e = j.early
        assert e is not None and j.target is not None
        nodes: Counter[str] = Counter(s.node for s in e.free)
        try:
            e.ws = self.ex.launcher.reserve(Target.of(j.target.plan, tuple(nodes.items()),
                                                      len(e.free)))
        except LaunchError as exc:
            return str(exc)
        e.ws.target = j.target
        if self.ex.launcher.gpu:
            e.devices = [s.actor.devices.remote() for s in e.donated]
        return None

    def failure(self, j: _Job) -> str | None:
        e, job_id = j.early, j.launch.job_id
        assert e is not None and j.target is not None and j.target.nodes is not None
        ws = e.ws
        if not self.ex.node_table.still_fits(j.target.nodes):
            return "a node of its placement has left"
        if ws.phase == "pg":
            if ready(*ws.waiting, *e.devices):
                self.ex.launcher.create_actors(ws, job_id, f"{j.launches}e", self.ex.node_table,
                                               borrowed=[(s.pg, s.bundle, s.node) for s in e.donated])
        elif ws.phase == "addr":
            if ready(*ws.waiting):
                try:
                    devices = [ray.get(ref) for ref in e.devices]
                except RayError:
                    return "a donor's worker was lost before it named its GPUs"
                own = len(ws.seats) - len(e.donated)
                per_rank = [devices[seat - own] if devices and seat >= own else None
                            for seat, _, _, _ in ws.slots]
                if not self.ex.start_set(j, ws, {ENV_EARLY_START: str(e.generation)}, per_rank):
                    return "its rank 0's actor was lost while starting"
                self.table.files.record_workers(job_id, ws.names)
        elif ws.phase == "start" and ready(*ws.starts):
            error = ws.start_error()
            if error:
                return error
            ws.phase = "run"
        if ws.started:
            ws.collect()
            if any(c is not None for c in ws.codes):
                return (f"a worker exited (statuses {ws.codes}) before it was ready"
                        + lost_note([c for c in ws.codes if c is not None]))
        return None

    def donor_keeps(self, d: _Job, slots: Sequence[Seat]) -> bool:
        if d.state is not ExecState.RUNNING or d.resize is not None or d.ws is None:
            return False
        held = d.ws.seat_keys()
        giving = {self._donated_seat(d, rank).key for rank in self._leaving(d)}
        return any(s.key in held and s.key not in giving for s in slots)

    def handed_over(self, j: _Job) -> bool:
        e = j.early
        assert e is not None
        return e.ws.phase == "run" and all(not self._donor_holds(s) and ready(s.done)
                                           for s in e.donated)

    def take(self, j: _Job, e: EarlyStart) -> None:
        """The early worker set, with the donated placement groups now its own."""
        assert isinstance(e, RayEarlyStart) and j.target is not None
        ws = e.ws
        ws.pgs.extend(s.pg for s in e.donated)
        j.ws = ws
        j.plan = WorkerPlan(ws.placement, j.target.plan.batch)
        self.table.files.record_workers(j.launch.job_id, ws.names)

    def drop(self, j: _Job) -> None:
        """End the early workers and free the placement groups they reserved, and the donated
        ones whose donor has already given them up (the others stay the donor's)."""
        e, j.early = j.early, None
        assert e is not None
        e.ws.release()
        remove_groups([s.pg for s in e.donated if not self._donor_holds(s)])
