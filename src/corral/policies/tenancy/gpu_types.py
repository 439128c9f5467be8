"""The tenancy layer on a cluster of several GPU types: shares per type added up, the most a
leaf may hold of a type, and each queue's jobs kept within one type of its sub-cluster (a gang
whole: `one_type_each`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from corral.core.cluster import Cluster, Placement, consolidated
from corral.core.gpu_types import within_one_type
from corral.core.jobs import STATUS_PENDING, Assignment, Decision, JobSpec, JobView
from corral.core.queues import QueueTree, Shares

__all__ = ["fits", "leaf_limits", "one_type_each", "runs_on", "summed", "waiting"]


def summed(per_type: tuple[Shares, ...], leaves: tuple[str, ...]) -> Shares:
    """Per-type shares added up, per leaf (what a typed tree's queues get in all)."""
    def total(field: str) -> dict[str, int]:
        return {q: sum(getattr(s, field)[q] for s in per_type) for q in leaves}
    reclaimed = dict.fromkeys(q for s in per_type for q in s.reclaimed_from)
    return Shares(total("share"), total("fair"), total("guaranteed"), total("demand"),
                  tuple(reclaimed))


def one_type_each(decision: Decision, part: Cluster, specs: Mapping[str, JobSpec],
                  held: Mapping[str, Placement], elastic: bool) -> Decision:
    """A type-unaware inner policy's `decision` on a queue's mixed sub-cluster `part` with each
    job on one type and on its `gpu_type` (`specs`); `held`: what its running jobs hold now.

    An elastic policy's jobs go through `within_one_type` (which may shrink one to what one
    type holds). A gang scheduler's decision, where some job needs moving, is packed again
    type-aware: the jobs that keep what they hold stay, the others are placed largest first,
    each on the type with the fewest free GPUs that still hold it (`consolidated` within it); a
    gang that fits on none whole is left out (the caller asks the policy again without it)."""
    placed = within_one_type(decision, part, specs)
    if elastic or placed is decision:
        return placed
    free = list(part.gpus_per_node)
    out: dict[str, Assignment] = {}
    movers = []
    for name, a in decision.assignments.items():
        if not a.placement.slots:
            continue
        if held.get(name) == a.placement:
            for node, gpus in a.placement.slots:
                free[node] -= gpus
            out[name] = a
        else:
            movers.append(name)
    movers.sort(key=lambda n: -decision.assignments[n].num_gpus)
    for name in movers:
        a = decision.assignments[name]
        wanted = specs[name].gpu_type
        k = a.num_gpus
        best: tuple[int, tuple[int, ...]] | None = None
        for t in part.gpu_types:
            nodes = part.nodes_of_type(t)
            room = sum(free[n] for n in nodes)
            if wanted in (None, t) and room >= k and (best is None or room < best[0]):
                best = (room, nodes)
        if best is None:
            continue
        nodes = best[1]
        packed = consolidated([free[n] for n in nodes], k)
        assert packed is not None  # the type has k GPUs free
        slots = tuple((nodes[i], gpus) for i, gpus in packed.slots)
        for node, gpus in slots:
            free[node] -= gpus
        out[name] = Assignment(Placement(slots), a.batch)
    return Decision({n: out[n] for n in decision.assignments if n in out}, placed.reasons,
                    placed.shrinks)


def fits(spec: JobSpec, part: Cluster, elastic: bool) -> bool:
    """Could one GPU type of `part` hold the job (its `gpu_type`, if pinned; a gang whole, an
    elastic job at its `min_gpus`)? A type-unaware policy would otherwise place it over two
    types, and a gang put back within one would not fit, with GPUs a smaller job could use."""
    least = max(1, spec.min_gpus) if elastic else max(spec.gpus, spec.min_gpus)
    return any(part.gpus_of_type(t) >= least for t in part.types_for(spec))


def leaf_limits(tree: QueueTree) -> dict[str, int]:
    """The most each leaf may hold (its own limit and its cohorts'), where one is set."""
    out = {}
    for q in tree.leaves:
        caps = [tree[a].any_limit for a in (q, *tree.ancestors(q))]
        if any(c is not None for c in caps):
            out[q] = min(c for c in caps if c is not None)
    return out


def waiting(view: JobView) -> JobView:
    """`view` as a waiting job (one the carve takes out)."""
    return dataclasses.replace(view, status=STATUS_PENDING, assignment=None)


def runs_on(view: JobView, cluster: Cluster) -> str | None:
    """The GPU type a running job's GPUs are of (None: it waits)."""
    if not (view.is_running and view.assignment is not None and view.assignment.placement.slots):
        return None
    return cluster.node_types[view.assignment.placement.slots[0][0]]
