"""The cluster a policy sees on Ray, and how a policy's placement becomes a placement group.

`NodeTable` turns `ray.nodes()` into corral's `Cluster`: alive nodes offering the slot
resource, one slot per unit. Indices must name the same machine from round to round, so nodes
keep first-seen order (head first), leavers drop out and joiners append (Ray's id order would
shuffle). `bundles_for`: one bundle per node, pinned by the `ray.io/node-id` label,
STRICT_PACK on one node, STRICT_SPREAD on several; a job whose node has gone restarts on
one-slot bundles with PACK. Pure functions of plain data; no Ray import.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from corral.core.cluster import Cluster, Node, Placement
from corral.protocol.report import gpu_type_name

__all__ = ["RayNode", "NodeTable", "Bundles", "bundles_for", "packed_bundles", "ranks_by_node",
           "NODE_ID_LABEL", "node_gpu_type"]

NODE_ID_LABEL = "ray.io/node-id"
ACCELERATOR_LABEL = "ray.io/accelerator-type"
ACCELERATOR_RESOURCE = "accelerator_type:"
_HEAD_RESOURCE = "node:__internal_head__"


def node_gpu_type(raw: Mapping[str, Any]) -> str:
    """The GPU type of one `ray.nodes()` entry: its `ray.io/accelerator-type` label where Ray sets
    one, else the `accelerator_type:<NAME>` resource Ray gives GPU nodes
    (`accelerator_type:A100`), as corral's short lower-case name (`gpu_type_name`: A100-80G ->
    a100, T4 -> t4); "" (the unnamed type) for a node with neither."""
    label = (raw.get("Labels") or {}).get(ACCELERATOR_LABEL)
    if isinstance(label, str) and label.strip():
        return gpu_type_name(label)
    names = sorted(k[len(ACCELERATOR_RESOURCE):] for k in (raw.get("Resources") or {})
                   if k.startswith(ACCELERATOR_RESOURCE))
    return gpu_type_name(names[0]) if names else ""


@dataclass(frozen=True)
class RayNode:
    node_id: str
    address: str
    slots: int
    head: bool = False
    gpu_type: str = ""

    @property
    def name(self) -> str:
        return f"{self.address}/{self.node_id[:8]}"


class NodeTable:
    """Alive Ray nodes offering `resource`, in a stable order (see the module docstring)."""

    def __init__(self, resource: str) -> None:
        self.resource = resource
        self.nodes: tuple[RayNode, ...] = ()
        self._seen: dict[str, int] = {}

    def update(self, raw: Iterable[Mapping[str, Any]]) -> tuple[RayNode, ...]:
        """Refresh from `ray.nodes()` output; returns the nodes in order."""
        alive = []
        for n in raw:
            slots = int(n.get("Resources", {}).get(self.resource, 0))
            if n.get("Alive") and slots >= 1:
                alive.append(RayNode(n["NodeID"], n.get("NodeManagerAddress", "?"), slots,
                                     _HEAD_RESOURCE in n.get("Resources", {}),
                                     node_gpu_type(n)))
        for node in sorted(alive, key=lambda n: (not n.head, n.address, n.node_id)):
            self._seen.setdefault(node.node_id, len(self._seen))
        self.nodes = tuple(sorted(alive, key=lambda n: self._seen[n.node_id]))
        return self.nodes

    def cluster(self) -> Cluster:
        return Cluster(tuple(Node(n.name, n.slots, n.gpu_type) for n in self.nodes))

    def type_of(self, node_id: str) -> str:
        """The GPU type of node `node_id` ("" for the unnamed type, or a node gone)."""
        return next((n.gpu_type for n in self.nodes if n.node_id == node_id), "")

    @property
    def total_slots(self) -> int:
        return sum(n.slots for n in self.nodes)

    def alive(self, node_id: str) -> bool:
        return any(n.node_id == node_id for n in self.nodes)

    def index_of(self, node_id: str) -> int | None:
        for i, n in enumerate(self.nodes):
            if n.node_id == node_id:
                return i
        return None

    def resolve(self, placement: Placement) -> tuple[tuple[str, int], ...] | None:
        """`placement` as (node id, workers) pairs, or None if it does not fit the nodes now."""
        out = []
        for index, count in placement.slots:
            if not 0 <= index < len(self.nodes) or count > self.nodes[index].slots:
                return None
            out.append((self.nodes[index].node_id, count))
        return tuple(out)

    def still_fits(self, nodes: Sequence[tuple[str, int]]) -> bool:
        """Every node of a resolved placement is still here with enough slots."""
        slots = {n.node_id: n.slots for n in self.nodes}
        return all(slots.get(node_id, 0) >= count for node_id, count in nodes)

    def placement_of(self, node_ids: Sequence[str]) -> Placement:
        """The placement of workers running on `node_ids` (one entry per worker)."""
        counts: dict[int, int] = {}
        for node_id in node_ids:
            index = self.index_of(node_id)
            if index is not None:
                counts[index] = counts.get(index, 0) + 1
        return Placement.of(counts)


@dataclass(frozen=True)
class Bundles:
    """A placement group request: bundles, strategy and per-bundle label selectors."""

    bundles: tuple[dict[str, float], ...]
    strategy: str
    selectors: tuple[dict[str, str], ...] | None


def bundles_for(nodes: Sequence[tuple[str, int]], resource: str) -> Bundles:
    """One bundle per node of a resolved placement, pinned to that node."""
    bundles = tuple({resource: float(count)} for _, count in nodes)
    selectors = tuple({NODE_ID_LABEL: node_id} for node_id, _ in nodes)
    return Bundles(bundles, "STRICT_PACK" if len(nodes) == 1 else "STRICT_SPREAD", selectors)


def packed_bundles(count: int, resource: str) -> Bundles:
    """`count` one-slot bundles wherever Ray can fit them, on as few nodes as it can."""
    return Bundles(tuple({resource: 1.0} for _ in range(count)), "PACK", None)


def ranks_by_node(bundle_sizes: Sequence[int], bundle_nodes: Sequence[str],
                  node_order: Sequence[str]) -> list[tuple[int, str, int, int]]:
    """Worker slots of a ready placement group, in rank order: (bundle index, node id,
    local rank, local world size). Ranks go node by node in the table's order, so that the
    workers of one node are consecutive and rank 0 is on the first node."""
    order = {node_id: i for i, node_id in enumerate(node_order)}
    slots = [(b, node) for b, (size, node) in enumerate(zip(bundle_sizes, bundle_nodes))
             for _ in range(size)]
    slots.sort(key=lambda s: (order.get(s[1], len(order)), s[1], s[0]))
    per_node: dict[str, int] = {}
    for _, node in slots:
        per_node[node] = per_node.get(node, 0) + 1
    seen: dict[str, int] = {}
    out = []
    for b, node in slots:
        out.append((b, node, seen.get(node, 0), per_node[node]))
        seen[node] = seen.get(node, 0) + 1
    return out
