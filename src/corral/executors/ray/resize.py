"""In-place resize on Ray (ONES §3.3.1; protocol: corral.protocol.inplace).

In place only when every node of the job gains or loses workers (not both) and rank 0's node
keeps it; anything else is checkpoint-restart. Growing, new workers get pinned placement
groups of their own and get ready while the old train; shrinking, each losing node's highest
ranks leave and their groups are given back. `plan_in_place` decides, `RayResize` records one
resize under way, `merged` builds the new worker set, `PidLookup` asks rank 0's actor (without
waiting) whether its pid is the trainer. Plain data; the caller imports Ray.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.executors.ray.launch import Target, WorkerSet
from corral.executors.resize import ResizeDeadlines, ResizeTimeline

__all__ = ["InPlacePlan", "PidLookup", "RayResize", "plan_in_place", "merged"]


@dataclass(frozen=True)
class InPlacePlan:
    """Each old rank's new rank (None: it leaves), and the new workers to start, as (node id,
    count) in rank order after the workers that stay."""

    ranks: dict[int, int | None]
    joiners: tuple[tuple[str, int], ...]

    @property
    def staying(self) -> list[int]:
        """Old ranks that stay, in their new rank order."""
        return [r for n, r in sorted((n, r) for r, n in self.ranks.items() if n is not None)]

    @property
    def leaving(self) -> list[int]:
        return [r for r, n in self.ranks.items() if n is None]

    @property
    def new_world(self) -> int:
        return len(self.staying) + sum(c for _, c in self.joiners)


def plan_in_place(old_nodes: Sequence[str], new_nodes: Sequence[tuple[str, int]]) -> InPlacePlan | None:
    """How a worker set with rank r on `old_nodes[r]` becomes `new_nodes` ((node id, workers)
    pairs) in place, or None when it cannot: no change, a node that gains workers while
    another loses some, or rank 0's node losing it."""
    old = Counter(old_nodes)
    new = Counter({node: count for node, count in new_nodes})
    change = {node: new[node] - old[node] for node in (*old, *new)}
    if not any(change.values()) or (
            any(d > 0 for d in change.values()) and any(d < 0 for d in change.values())):
        return None
    leaving: set[int] = set()
    for node, d in change.items():
        if d < 0:
            on_node = [r for r, n in enumerate(old_nodes) if n == node]
            leaving.update(on_node[d:])  # its highest ranks
    if 0 in leaving:
        return None
    staying = [r for r in range(len(old_nodes)) if r not in leaving]
    ranks = {r: (staying.index(r) if r not in leaving else None) for r in range(len(old_nodes))}
    joiners = tuple((node, change[node]) for node, _ in new_nodes if change[node] > 0)
    return InPlacePlan(ranks, joiners)


@dataclass
class RayResize(ResizeTimeline):
    """One in-place resize under way: to `target` as generation `generation` of the job's
    process group (the launch number of the new worker set)."""

    target: Target
    generation: int
    plan: InPlacePlan
    joiners: WorkerSet | None  # the new workers' set (a grow), None on a shrink
    address: list[Any]  # the future of the new rendezvous: old rank 0's node and a free port
    master: tuple[str, int] | None = None
    phase: str = "joining"  # "joining": the new workers start; "switching": request sent
    started: float = field(default_factory=time.monotonic)
    deadline: float = 0.0
    limits: ResizeDeadlines = field(default_factory=ResizeDeadlines)

    @property
    def new_world(self) -> int:
        return self.plan.new_world

    @property
    def joiner_ranks(self) -> set[int]:
        return set(range(len(self.plan.staying), self.plan.new_world))


@dataclass(frozen=True)
class PidLookup:
    """The pid of rank 0's command, asked of its actor (`actor`: the actor's name) and read on
    a later look, so that the executor's thread never waits on it: `ref` is the answer's
    future; after `deadline` (time.monotonic()) without one, the job is resized by
    checkpoint-restart. A worker that stays keeps its actor and command, so an answer holds
    for every later resize with the same rank-0 actor."""

    actor: str
    ref: Any
    deadline: float


def local_ranks(nodes: Sequence[str]) -> list[tuple[int, int]]:
    """(local rank, local world size) of each rank on `nodes` (each rank's node)."""
    per_node = Counter(nodes)
    seen: Counter[str] = Counter()
    out = []
    for node in nodes:
        out.append((seen[node], per_node[node]))
        seen[node] += 1
    return out


def merged(old: WorkerSet, r: RayResize) -> WorkerSet:
    """The job's worker set once the new process group trains: the workers that stayed, in
    their new rank order, then the new ones. The leavers' actors and groups are not in it."""
    ws = WorkerSet(r.target, [], phase="run")
    sources = [(old, rank) for rank in r.plan.staying]
    if r.joiners is not None:
        sources += [(r.joiners, rank) for rank in range(len(r.joiners.actors))]
    nodes = [s.slots[rank][1] for s, rank in sources]
    for (s, rank), node, (local, size) in zip(sources, nodes, local_ranks(nodes)):
        seat = s.seats[s.slots[rank][0]]
        ws.pgs.append(seat[0])
        ws.slots.append((len(ws.seats), node, local, size))
        ws.seats.append(seat)
        ws.actors.append(s.actors[rank])
        ws.names.append(s.names[rank])
        ws.starts.append(s.starts[rank])
        ws.waits.append(s.waits[rank])
        ws.codes.append(s.codes[rank])
    return ws
