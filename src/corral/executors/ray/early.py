"""Early initialisation on Ray (sequence: corral.executors.early): what a slot is to the Ray
executor's own books, and the record of one early start under way.

Ray cannot reserve a slot another job's placement group holds, so the executor's books place
the workers: on *free* slots, a pinned placement group of their own; on a *donated* slot, the
donor worker's own group, asking no resource and using the donor actor's GPUs
(`WorkerActor.devices`). When the donor leaves, that group passes to the incoming job instead of
being removed, so the slot is never free in Ray. Only donors whose every worker has its own
group give slots up early. Plain data; the caller imports Ray.
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
