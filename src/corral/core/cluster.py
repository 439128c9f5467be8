"""Cluster shape and job placements: which nodes a job's GPUs are on, and of what GPU type.

A node has a GPU type: a short name (`k80`, `v100`, `dgx-ext`, `A100-SXM4-80GB`), or the empty
string for "the one unnamed type" (every node of `16x4` or of a `name gpus` file). Names are
matched case-insensitively: a type's key is its lower-case form (`gpu_type_key`), which every
comparison uses, and the cluster remembers the spelling as written for what it shows
(`Cluster.type_label`). A `Placement` is only (node, GPUs) pairs; its type is the cluster's
answer (`Cluster.placement_type`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from corral.core.errors import InputError

if TYPE_CHECKING:
    from corral.core.gpu_speeds import GpuSpeed

#: What a GPU type may be called: letters (either case), digits, `-`, `_` and `.`, at most 32
#: characters, starting with a letter or digit (`k80`, `v100`, `dgx-ext`, `A100-SXM4-80GB`).
GPU_TYPE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")


def gpu_type_problem(name: str) -> str | None:
    """Why `name` cannot be a GPU type name (a short phrase), or None when it can."""
    if name == "":
        return "the GPU type name is empty (e.g. v100)"
    if not isinstance(name, str) or not GPU_TYPE_PATTERN.fullmatch(name):
        return (f"GPU type {name!r} has odd characters: use letters, digits, '-', '_' and '.', "
                "at most 32, starting with a letter or digit (e.g. v100, A100-SXM4-80GB)")
    return None


def gpu_type_key(name: str) -> str:
    """The key a GPU type name is matched by: its lower-case form (`A100-SXM4-80GB` and
    `a100-sxm4-80gb` are one type)."""
    return name.lower()


class Pinned(Protocol):
    """What `Cluster.types_for` reads of a job: the one GPU type it may run on, or None for any
    (a `JobSpec`; a Protocol so that this module needs nothing of `corral.core.jobs`)."""

    @property
    def gpu_type(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Node:
    """One machine: a name, how many GPUs it has and their type ("" is the unnamed type).

    `gpu_type` is the type's key (`gpu_type_key`: a name given in upper case is kept in
    `type_label` as written and matched by its lower-case form)."""

    name: str
    gpus: int
    gpu_type: str = ""
    type_label: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.gpu_type and (problem := gpu_type_problem(self.gpu_type)):
            raise ValueError(f"node {self.name}: {problem}")
        if not self.type_label:
            object.__setattr__(self, "type_label", self.gpu_type)
        object.__setattr__(self, "gpu_type", gpu_type_key(self.gpu_type))

    def row(self) -> list[str | int]:
        """The node as a run's settings store it: [name, gpus], and its type as written after
        them when it has a named one (`from_row` reads both forms)."""
        return [self.name, self.gpus, self.type_label] if self.gpu_type else [self.name, self.gpus]

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Node:
        """The node `row()` made; a row of a settings file written before types, [name, gpus],
        is a node of the unnamed type."""
        return cls(str(row[0]), int(row[1]), str(row[2]) if len(row) > 2 and row[2] else "")


@dataclass(frozen=True, slots=True)
class Cluster:
    """An ordered list of nodes; node indices are positions in this list.

    The totals (`total_gpus`, `gpus_per_node`, `max_node_gpus`) and the type tables
    (`node_types`, `gpu_types`, `is_mixed`, per-type nodes and GPUs) are computed once, when
    the cluster is made: policies and the simulator read them at every round and every job, and
    walking 4,000 nodes each time was a measurable share of a datacenter-sized simulation.
    """

    nodes: tuple[Node, ...]
    #: GPU types described by their speed relative to another, as a cluster file's fourth
    #: column gives them (`corral.core.gpu_speeds.GpuSpeed`; the simulator's truth reads them).
    speeds: tuple[GpuSpeed, ...] = ()
    total_gpus: int = field(default=0, init=False, compare=False, repr=False)
    gpus_per_node: tuple[int, ...] = field(default=(), init=False, compare=False, repr=False)
    max_node_gpus: int = field(default=0, init=False, compare=False, repr=False)
    #: The GPU type of each node, by node index.
    node_types: tuple[str, ...] = field(default=(), init=False, compare=False, repr=False)
    #: The distinct GPU types, in the order their first node appears (`("",)` for a cluster of
    #: the one unnamed type, `()` for no nodes).
    gpu_types: tuple[str, ...] = field(default=(), init=False, compare=False, repr=False)
    #: More than one GPU type: a job's placement may then span types (which check_decision
    #: refuses unless the policy allows it).
    is_mixed: bool = field(default=False, init=False, compare=False, repr=False)
    _type_nodes: Mapping[str, tuple[int, ...]] = field(
        default_factory=dict, init=False, compare=False, repr=False)
    _type_gpus: Mapping[str, int] = field(
        default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        per_node = tuple(n.gpus for n in self.nodes)
        object.__setattr__(self, "gpus_per_node", per_node)
        object.__setattr__(self, "total_gpus", sum(per_node))
        object.__setattr__(self, "max_node_gpus", max(per_node, default=0))
        node_types = tuple(n.gpu_type for n in self.nodes)
        type_nodes: dict[str, list[int]] = {}
        for i, t in enumerate(node_types):
            type_nodes.setdefault(t, []).append(i)
        object.__setattr__(self, "node_types", node_types)
        object.__setattr__(self, "gpu_types", tuple(type_nodes))
        object.__setattr__(self, "is_mixed", len(type_nodes) > 1)
        object.__setattr__(self, "_type_nodes", {t: tuple(ns) for t, ns in type_nodes.items()})
        object.__setattr__(self, "_type_gpus", {t: sum(per_node[i] for i in ns)
                                                for t, ns in type_nodes.items()})

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    def nodes_of_type(self, gpu_type: str) -> tuple[int, ...]:
        """Indices of the nodes of `gpu_type`, in node order (empty for a type not here)."""
        return self._type_nodes.get(gpu_type, ())

    def gpus_of_type(self, gpu_type: str) -> int:
        """GPUs of `gpu_type` in the cluster (0 for a type not here)."""
        return self._type_gpus.get(gpu_type, 0)

    def max_node_gpus_of_type(self, gpu_type: str) -> int:
        """GPUs of the largest node of `gpu_type` (0 for a type not here): the most a job on
        that type runs on one node."""
        return max((self.gpus_per_node[n] for n in self.nodes_of_type(gpu_type)), default=0)

    def types_for(self, job: Pinned) -> tuple[str, ...]:
        """The GPU types of this cluster `job` may run on, in the cluster's type order: its
        `gpu_type` when it names one the cluster has (none when the cluster lacks it), else
        every type (`("",)` on a cluster of the one unnamed type)."""
        wanted = job.gpu_type
        if wanted is None:
            return self.gpu_types
        return (wanted,) if wanted in self._type_nodes else ()

    def type_label(self, gpu_type: str) -> str:
        """`gpu_type` as the cluster was told it (`A100-SXM4-80GB` for key `a100-sxm4-80gb`);
        `gpu_type` itself for a type not here."""
        nodes = self._type_nodes.get(gpu_type)
        return self.nodes[nodes[0]].type_label if nodes else gpu_type

    def placement_type(self, placement: Placement) -> str | None:
        """The GPU type all of `placement`'s nodes have; None when it spans types, or is empty.

        O(1) on a cluster of one type; otherwise one look-up per occupied node."""
        slots = placement.slots
        if not slots:
            return None
        if not self.is_mixed:
            return self.gpu_types[0]
        types = self.node_types
        t = types[slots[0][0]]
        for node, _ in slots:
            if types[node] != t:
                return None
        return t

    def placement_text(self, placement: Placement) -> str:
        """`placement` with its nodes' names, as `/cluster` lists them: `localhost-t4:1`,
        `node0:4+node1:4`; `-` when empty (`str(placement)` says `n0:4`, by index)."""
        nodes = self.nodes
        return "+".join(f"{nodes[n].name if 0 <= n < len(nodes) else f'n{n}'}:{g}"
                        for n, g in placement.slots) or "-"

    @classmethod
    def uniform(cls, num_nodes: int, gpus_per_node: int, gpu_type: str = "") -> Cluster:
        """`num_nodes` nodes of `gpus_per_node` GPUs: `node0`, `node1`, ... for the unnamed
        type, `<type>-0`, `<type>-1`, ... for a named one."""
        prefix = f"{gpu_type}-" if gpu_type else "node"
        return cls(tuple(Node(f"{prefix}{i}", gpus_per_node, gpu_type)
                         for i in range(num_nodes)))

    @classmethod
    def parse(cls, text: str) -> Cluster:
        """Build from `NxG` (e.g. `16x4`), from `TYPE:NxG` parts separated by commas (e.g.
        `k80:6x4,p100:3x8,v100:2x8`: nodes `k80-0` ... `k80-5`, `p100-0` ..., each type once)
        or from a cluster file path.

        A cluster file has one node per line: `name gpus` or `name gpus type` (columns separated
        by spaces or commas), and after the type, optionally, its speed relative to another
        type (`a100-0 8 a100 v100*2.2`: `corral.core.gpu_speeds`; one line of a type is enough,
        two must agree); `#` starts a comment; a header line (`name gpus [type [speed]]`) is
        allowed. Either every node has a type or none does.
        """
        m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
        if m:
            nodes, gpus = int(m.group(1)), int(m.group(2))
            if nodes < 1 or gpus < 1:
                raise InputError(f"cluster {text!r}: need at least 1 node and 1 GPU per node")
            return cls.uniform(nodes, gpus)
        path = Path(text)
        if path.is_file():
            return cls.from_file(path)
        if ":" in text or "," in text:
            return cls._parse_typed(text)
        if not path.exists():
            raise InputError(f"cluster {text!r} is neither NODESxGPUS (e.g. 16x4), "
                             "TYPE:NODESxGPUS,... (e.g. k80:6x4,v100:2x8) nor an existing file")
        return cls.from_file(path)

    @classmethod
    def _parse_typed(cls, text: str) -> Cluster:
        """`TYPE:NxG,TYPE:NxG,...`; InputError naming the part and its column otherwise."""
        nodes: list[Node] = []
        first_part: dict[str, int] = {}
        column = 1
        for i, raw in enumerate(text.split(","), start=1):
            part = raw.strip()
            where = (f"cluster {text!r}, part {i} {part!r} "
                     f"(column {column + len(raw) - len(raw.lstrip())})")
            column += len(raw) + 1
            m = re.fullmatch(r"([^:\s]*)\s*:\s*(\d+)\s*[xX]\s*(\d+)", part)
            if not m:
                what = "is empty" if not part else "is not TYPE:NODESxGPUS"
                raise InputError(f"{where} {what} (e.g. k80:6x4,v100:2x8)")
            gpu_type, count, gpus = m.group(1), int(m.group(2)), int(m.group(3))
            if problem := gpu_type_problem(gpu_type):
                raise InputError(f"{where}: {problem}")
            if count < 1:
                raise InputError(f"{where}: zero nodes")
            if gpus < 1:
                raise InputError(f"{where}: zero GPUs per node")
            if (key := gpu_type_key(gpu_type)) in first_part:
                raise InputError(f"{where}: type {gpu_type} given twice (first in part "
                                 f"{first_part[key]}; names match whatever their case)")
            first_part[key] = i
            nodes.extend(cls.uniform(count, gpus, gpu_type).nodes)
        return cls(tuple(nodes))

    @classmethod
    def from_file(cls, path: Path) -> Cluster:
        from corral.core.gpu_speeds import parse_speed

        nodes: list[Node] = []
        speeds: dict[str, GpuSpeed] = {}
        typed: tuple[int, bool] | None = None  # (line, has a type) of the first node
        for lineno, raw in enumerate(path.read_text().splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = [p for p in re.split(r"[,\s]+", line) if p]
            if parts[0].lower() == "name" and (len(parts) < 2 or not parts[1].isdigit()):
                continue  # a header line
            if len(parts) not in (2, 3, 4) or not parts[1].isdigit() or int(parts[1]) < 1:
                raise InputError(f"{path}:{lineno}: expected 'name gpus', 'name gpus type' or "
                                 f"'name gpus type speed' with gpus >= 1, got {raw!r}")
            gpu_type = parts[2] if len(parts) >= 3 else ""
            if gpu_type and (problem := gpu_type_problem(gpu_type)):
                raise InputError(f"{path}:{lineno}: {problem}")
            if len(parts) == 4:
                speed = parse_speed(gpu_type, parts[3], f"{path}:{lineno}")
                earlier = speeds.setdefault(speed.gpu_type, speed)
                if earlier != speed:
                    raise InputError(f"{path}:{lineno}: {speed} but {earlier.where} says "
                                     f"{earlier}")
            if typed is None:
                typed = (lineno, bool(gpu_type))
            elif typed[1] != bool(gpu_type):
                raise InputError(f"{path}:{lineno}: node {parts[0]} "
                                 f"{'has a' if gpu_type else 'has no'} GPU type but the node "
                                 f"on line {typed[0]} {'has none' if gpu_type else 'has one'}: "
                                 "give every node a type or none")
            nodes.append(Node(parts[0], int(parts[1]), gpu_type))
        if not nodes:
            raise InputError(f"{path}: no nodes listed")
        return cls(tuple(nodes), tuple(speeds.values()))

    def describe(self) -> str:
        """`16x4` (or `N nodes, G GPUs` when sizes differ) for the one unnamed type; per type,
        `k80:6x4,v100:2x8` (or `v100:3 nodes/20 GPUs` for a type of mixed sizes) otherwise."""
        if self.gpu_types in ((), ("",)):
            return _shape(self.gpus_per_node)
        parts = []
        for t in self.gpu_types:
            sizes = [self.gpus_per_node[n] for n in self.nodes_of_type(t)]
            shape = _shape(sizes).replace(" nodes, ", " nodes/")
            parts.append(f"{self.type_label(t) or '(unnamed)'}:{shape}")
        return ",".join(parts)


def _shape(sizes: Iterable[int]) -> str:
    """`NxG` when all sizes are equal, else `N nodes, G GPUs`."""
    sizes = list(sizes)
    distinct = set(sizes)
    if len(distinct) == 1:
        return f"{len(sizes)}x{distinct.pop()}"
    return f"{len(sizes)} nodes, {sum(sizes)} GPUs"


@dataclass(frozen=True, slots=True)
class Placement:
    """GPUs a job holds on each node: sorted `(node index, gpus)` pairs, gpus > 0 (given in
    another order, or a node twice, they are sorted and merged)."""

    slots: tuple[tuple[int, int], ...] = ()
    num_gpus: int = field(default=0, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        slots = self.slots
        if len(slots) > 1 and any(a[0] >= b[0] for a, b in zip(slots, slots[1:])):
            # the same GPUs in another order are the same placement: a job given them again
            # keeps running (no preemption and restart, issue 43's churn)
            slots = Placement.of(slots).slots
            object.__setattr__(self, "slots", slots)
        object.__setattr__(self, "num_gpus", sum(g for _, g in slots))

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


def consolidated(free: list[int], num_gpus: int) -> Placement | None:
    """Place `num_gpus` on as few nodes as possible, or None when they do not fit.

    One node if any can hold the job (the fullest such node, to keep big holes for big jobs);
    otherwise whole nodes with the most free GPUs first, the remainder on the best-fitting node.
    (Here in core so that `corral.core.gpu_types` packs as policies do; policies use it as
    `corral.policies.placement.consolidated`.)
    """
    if num_gpus <= 0 or num_gpus > sum(free):
        return None
    # the fewest free GPUs that still hold the job, on the first such node: min((g, n)) over
    # the nodes with g >= num_gpus, read through the distinct free counts (C-level passes)
    holding = [g for g in set(free) if g >= num_gpus]
    if holding:
        g = min(holding)
        return Placement(((free.index(g), num_gpus),))
    order = sorted(range(len(free)), key=lambda n: (-free[n], n))
    slots: dict[int, int] = {}
    left = num_gpus
    for n in order:
        if left == 0 or free[n] == 0:
            break
        if free[n] <= left:
            slots[n] = free[n]
            left -= free[n]
        else:
            # the smallest node that still fits the remainder
            rest = min((free[m], m) for m in order if m not in slots and free[m] >= left)
            slots[rest[1]] = left
            left = 0
    return Placement.of(slots) if left == 0 else None
