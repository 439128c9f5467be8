"""Cluster shape and job placements: which nodes a job's GPUs are on."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from corral.core.errors import InputError


@dataclass(frozen=True, slots=True)
class Node:
    """One machine: a name and how many GPUs it has."""

    name: str
    gpus: int


@dataclass(frozen=True, slots=True)
class Cluster:
    """An ordered list of nodes; node indices are positions in this list.

    The totals (`total_gpus`, `gpus_per_node`, `max_node_gpus`) are computed once, when the
    cluster is made: policies and the simulator read them at every round and every job, and
    walking 4,000 nodes each time was a measurable share of a datacenter-sized simulation.
    """

    nodes: tuple[Node, ...]
    total_gpus: int = field(default=0, init=False, compare=False, repr=False)
    gpus_per_node: tuple[int, ...] = field(default=(), init=False, compare=False, repr=False)
    max_node_gpus: int = field(default=0, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        per_node = tuple(n.gpus for n in self.nodes)
        object.__setattr__(self, "gpus_per_node", per_node)
        object.__setattr__(self, "total_gpus", sum(per_node))
        object.__setattr__(self, "max_node_gpus", max(per_node, default=0))

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @classmethod
    def uniform(cls, num_nodes: int, gpus_per_node: int) -> Cluster:
        return cls(tuple(Node(f"node{i}", gpus_per_node) for i in range(num_nodes)))

    @classmethod
    def parse(cls, text: str) -> Cluster:
        """Build from `NxG` (e.g. `16x4`) or from a cluster file path.

        A cluster file has one node per line: `name gpus` (or `name,gpus`); `#` starts a comment.
        """
        m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
        if m:
            nodes, gpus = int(m.group(1)), int(m.group(2))
            if nodes < 1 or gpus < 1:
                raise InputError(f"cluster {text!r}: need at least 1 node and 1 GPU per node")
            return cls.uniform(nodes, gpus)
        path = Path(text)
        if not path.exists():
            raise InputError(f"cluster {text!r} is neither NODESxGPUS (e.g. 16x4) nor an existing file")
        return cls.from_file(path)

    @classmethod
    def from_file(cls, path: Path) -> Cluster:
        nodes: list[Node] = []
        for lineno, raw in enumerate(path.read_text().splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line or line.lower().startswith("name"):
                continue
            parts = [p for p in re.split(r"[,\s]+", line) if p]
            if len(parts) != 2 or not parts[1].isdigit() or int(parts[1]) < 1:
                raise InputError(f"{path}:{lineno}: expected 'name gpus' with gpus >= 1, got {raw!r}")
            nodes.append(Node(parts[0], int(parts[1])))
        if not nodes:
            raise InputError(f"{path}: no nodes listed")
        return cls(tuple(nodes))

    def describe(self) -> str:
        sizes = set(self.gpus_per_node)
        if len(sizes) == 1:
            return f"{self.num_nodes}x{sizes.pop()}"
        return f"{self.num_nodes} nodes, {self.total_gpus} GPUs"


@dataclass(frozen=True, slots=True)
class Placement:
    """GPUs a job holds on each node: sorted `(node index, gpus)` pairs, gpus > 0."""

    slots: tuple[tuple[int, int], ...] = ()
    num_gpus: int = field(default=0, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_gpus", sum(g for _, g in self.slots))

    @classmethod
    def of(cls, per_node: Mapping[int, int] | Iterable[tuple[int, int]]) -> Placement:
        items = per_node.items() if isinstance(per_node, Mapping) else per_node
        merged: dict[int, int] = {}
        for node, gpus in items:
            if gpus:
                merged[int(node)] = merged.get(int(node), 0) + int(gpus)
        return cls(tuple(sorted(merged.items())))

    @classmethod
    def from_dense(cls, counts: Iterable[int]) -> Placement:
        return cls(tuple((i, int(g)) for i, g in enumerate(counts) if g))

    @property
    def num_nodes(self) -> int:
        return len(self.slots)

    @property
    def counts(self) -> tuple[int, ...]:
        """GPUs per occupied node, in node order (the shape a step time depends on)."""
        return tuple(g for _, g in self.slots)

    def dense(self, num_nodes: int) -> list[int]:
        out = [0] * num_nodes
        for node, gpus in self.slots:
            out[node] = gpus
        return out

    def __bool__(self) -> bool:
        return bool(self.slots)

    def __str__(self) -> str:
        return "+".join(f"n{node}:{gpus}" for node, gpus in self.slots) or "-"


#: The empty placement (not running). Placements are immutable, so one object serves every
#: "nothing" in the simulator's hot loop instead of a new `Placement()` per job per round.
NO_PLACEMENT = Placement()
