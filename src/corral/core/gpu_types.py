"""Keeping a type-unaware policy's jobs within one GPU type.

On a cluster of several GPU types (`Cluster.is_mixed`) a policy that sees all GPUs as equal may
put one job on, say, K80s and V100s at once, which a data-parallel job runs at its slowest
GPU's pace and `check_decision` refuses. `within_one_type` moves each such job onto one type
with room, as Sia (SOSP'23)'s evaluation runs "Pollux (unaware)". The round loop calls it on
every decision of a policy not declaring itself type-aware, before `check_decision`; on a
cluster of one type it returns the decision itself at O(1) cost.
"""

from __future__ import annotations

from collections.abc import Mapping

from corral.core.cluster import Cluster, Placement, consolidated
from corral.core.jobs import Assignment, Decision, JobSpec
from corral.core.reasons import WaitKind, WaitReason, no_type_room

#: Who gives the reason of a job `within_one_type` leaves waiting.
ONE_TYPE = "one GPU type per job"

__all__ = ["within_one_type"]


def within_one_type(decision: Decision, cluster: Cluster,
                    specs: Mapping[str, JobSpec]) -> Decision:
    """`decision` with every job's GPUs on one GPU type (and on its `gpu_type`, if any), in order:
    assignments already so are kept as they are and their GPUs taken first; every other one, in
    decision order (the policies' priority order), is re-placed by `_replace`; a job no type has
    room for is left out this round, with its reason (`_no_room`) added to the decision's. A job
    some type could hold is never shrunk (only moved).
    `specs` maps job names to their JobSpecs (a job absent from it is unrestricted). Returns
    `decision` itself when the cluster has one type or nothing moves, else a new Decision in the
    same job order. Assumes `decision` over-allocates no node."""
    if not cluster.is_mixed:
        return decision
    types = cluster.node_types
    free = list(cluster.gpus_per_node)
    movers: list[str] = []
    for name, a in decision.assignments.items():
        slots = a.placement.slots
        if not slots:
            continue
        placed = cluster.placement_type(a.placement)
        spec = specs.get(name)
        wanted = spec.gpu_type if spec is not None else None
        if placed is not None and (wanted is None or wanted == placed):
            for node, gpus in slots:
                free[node] -= gpus
        else:
            movers.append(name)
    if not movers:
        return decision
    moved: dict[str, Assignment | None] = {}
    reasons = dict(decision.reasons)
    for name in movers:
        a = decision.assignments[name]
        spec = specs.get(name)
        wanted = spec.gpu_type if spec is not None else None
        least = spec.min_gpus if spec is not None else 1
        moved[name] = _replace(cluster, types, free, a, wanted, least)
        if moved[name] is None:
            reasons[name] = _no_room(cluster, free, min(a.placement.num_gpus, max(1, least)),
                                     wanted)
    out: dict[str, Assignment] = {}
    for name, a in decision.assignments.items():
        if name in moved:
            new = moved[name]
            if new is not None:
                out[name] = new
        else:
            out[name] = a
    return Decision(out, reasons, decision.shrinks)


def _no_room(cluster: Cluster, free: list[int], need: int, wanted: str | None) -> WaitReason:
    """Why `within_one_type` could place a job needing at least `need` GPUs on no one type
    with `free` GPUs per node left."""
    per_type = dict.fromkeys(cluster.gpu_types, 0)
    for node, gpus in enumerate(free):
        per_type[cluster.node_types[node]] += gpus
    named = no_type_room(ONE_TYPE, need, wanted, per_type) if wanted is not None else None
    if named is not None:
        return named
    best_type, best = max(per_type.items(), key=lambda item: (item[1], item[0]))
    return WaitReason(WaitKind.NO_FIT, f"{ONE_TYPE}: needs {need} GPU(s) of one type; the "
                      f"largest free block is {best} ({best_type})")


def _replace(cluster: Cluster, types: tuple[str, ...], free: list[int], a: Assignment,
             wanted: str | None, min_gpus: int = 1) -> Assignment | None:
    """`a`'s GPU count and batch on one type with `a`'s count free (taken from `free`), or None: the
    type holding most of its GPUs first, then the one with most free GPUs, then the cluster's
    type order; packed on as few nodes as possible, the fullest that fits first (`consolidated`).
    A job given more GPUs than any type it may use has (pollux, optimus, ones scale out over the
    whole cluster) is shrunk to the most free on one such type, its batch left to the job
    (`batch=None`), if that is at least `min_gpus`; else it would never run."""
    k = a.placement.num_gpus
    allowed = cluster.gpu_types if wanted is None else (wanted,)
    batch = a.batch
    if k > max(cluster.gpus_of_type(t) for t in allowed):
        k = max(sum(free[n] for n in cluster.nodes_of_type(t)) for t in allowed)
        if k < max(1, min_gpus):
            return None
        batch = None
    held: dict[str, int] = {}
    for node, gpus in a.placement.slots:
        held[types[node]] = held.get(types[node], 0) + gpus
    best: tuple[tuple[int, int, int], tuple[int, ...]] | None = None
    for rank, t in enumerate(allowed):
        nodes = cluster.nodes_of_type(t)
        room = sum(free[n] for n in nodes)
        if not nodes or room < k:
            continue
        key = (-held.get(t, 0), -room, rank)
        if best is None or key < best[0]:
            best = (key, nodes)
    if best is None:
        return None
    chosen = best[1]
    packed = consolidated([free[n] for n in chosen], k)
    assert packed is not None  # the type has k GPUs free
    slots = tuple((chosen[i], gpus) for i, gpus in packed.slots)  # node order kept
    for node, gpus in slots:
        free[node] -= gpus
    return Assignment(Placement(slots), batch)
