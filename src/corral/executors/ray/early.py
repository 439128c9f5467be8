"""Early initialisation on Ray (SideCar; the sequence is corral.executors.early): what a slot
is to the Ray executor's own books, and the record of one early start under way.

Ray cannot reserve a slot that another job's placement group still holds, so the incoming job
does not wait for Ray to hand it out. The executor's own books decide where its workers go:
on each node, the slots no job of this executor holds (the node's units of the slot resource
minus the workers, reservations and early starts of its jobs) and the slots its donors give up
there (`leaving_ranks`: the highest ranks on each node that loses workers, as an in-place
shrink frees them; every rank of a stopped donor).

* A *free* slot is reserved at once: a placement group of its own, pinned to its node, as for
  any launch; its worker's actor holds the slot in it.
* A *donated* slot is the donor worker's own placement group (one per worker). The incoming
  worker's actor goes into that same bundle asking for no resource - Ray places it on that
  node, beside the donor's worker, and the donor's worker still holds the slot - and runs the
  job on the GPUs the donor's actor was given (asked of it: `WorkerActor.devices`). When the
  donor gives the slot up (its leaver's actor ends in an in-place shrink; its worker set is
  released in a checkpoint-restart or a stop) the executor keeps that placement group instead
  of removing it, and it passes to the incoming job, which removes it when its own worker
  there ends. The slot is never free in Ray in between: no other job can take it, and the
  GPU the incoming worker initialised on is the one it trains on.

The hand-over is complete once each donor no longer holds a donated placement group in its
worker set and the donor's worker there has exited (its `wait` answered). Only donors whose
every worker has a placement group of its own give slots up early (a job packed wherever it
fit, in one group, does not: one bundle of a group cannot pass on alone).

Ray is imported by the caller only: this module handles plain data and the executor's records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.executors.early import EarlyStart
from corral.executors.ray.launch import WorkerSet

__all__ = ["Seat", "RayEarlyStart", "leaving_ranks"]


@dataclass(frozen=True)
class Seat:
    """One slot of an early start, named by `key`: a free one on `node` (`donor` None), or the
    one `donor`'s worker `rank` holds in bundle `bundle` of placement group `pg` (`done`: that
    worker's wait future; `actor`: its actor)."""

    key: str
    node: str
    label: str  # the node as the policy numbers it, for messages
    donor: str | None = None
    rank: int | None = None
    pg: Any = field(default=None, compare=False)
    bundle: int = field(default=0, compare=False)
    done: Any = field(default=None, compare=False)
    actor: Any = field(default=None, compare=False)

    def __repr__(self) -> str:
        return f"{self.label}:{'free' if self.donor is None else f'{self.donor}/rank {self.rank}'}"


@dataclass(kw_only=True)
class RayEarlyStart(EarlyStart):
    """An early start's Ray worker set: `ws` reserves the free slots (its own placement
    groups) and, once they are reserved, holds every worker's actor, the `donated` seats'
    after its own; `devices` are the futures of the donors' GPU ids (GPU slots only)."""

    ws: WorkerSet
    free: list[Seat]
    donated: list[Seat]
    devices: list[Any] = field(default_factory=list)


def leaving_ranks(nodes: Sequence[str], new: Mapping[str, int]) -> list[int]:
    """Ranks of a worker set with rank r on `nodes[r]` that leave when it becomes `new` (node
    id -> workers; nodes absent keep none): each node's highest ranks beyond its new count."""
    leaving: list[int] = []
    for node, count in Counter(nodes).items():
        on_node = [r for r, n in enumerate(nodes) if n == node]
        leaving += on_node[min(count, new.get(node, 0)):]
    return sorted(leaving)
