"""Keeping a type-unaware policy's jobs within one GPU type.

Most policies see the cluster's GPUs as equal. On a cluster of several GPU types
(`Cluster.is_mixed`) such a policy may put one job on, say, K80s and V100s at once, which a
data-parallel job runs at the pace of its slowest GPU and which `check_decision` refuses
unless the policy allows it. `within_one_type` is the layer between such a policy and the
cluster, as the Sia paper's evaluation runs "Pollux (unaware)" (Jayaram Subramanya et al.,
SOSP 2023): the policy decides as if the GPUs were equal, and the layer moves each job that spans types (or
sits on a type its `JobSpec.gpu_type` excludes) onto one type with room, with the same GPU
count and batch.

The round loop calls it on the decision of every policy that does not declare itself
type-aware, before `check_decision`; on a cluster of one type it returns the decision itself
at O(1) cost, so homogeneous simulations pay nothing for it.

What it does, in order (deterministic):

1. Assignments already within one type, and on the job's `gpu_type` when it names one, are
   kept exactly as they are (the same `Assignment` objects), and their GPUs are taken first,
   whatever their order in the decision.
2. Every other assignment, in decision order, is re-placed with the same GPU count and batch
   on one type that has that many GPUs free (within the job's `gpu_type` when it names one):
   the type holding most of its current GPUs first, then the type with the most free GPUs,
   then the cluster's type order; within the type the GPUs are packed on as few nodes as
   possible, the fullest node that fits first (`consolidated`, as policies place).
3. A job given more GPUs than any type it may use has (a policy that scales a job out over
   the whole cluster: pollux, optimus, ones) is shrunk to the most GPUs free on one such type
   (the type order of step 2 breaks ties), its batch left to the job (`batch=None`), provided
   that is at least its `min_gpus`; without this it would never run while the policy keeps
   asking for that count.
4. Any other job no type has room for gets no GPUs this round (it is left out of the decision).

Decided here, where Sia says nothing: a job that some type could hold is never shrunk to fit
(its count is the policy's choice; the layer only moves it), and jobs are re-placed in decision
order, which for the policies here is their priority order.
"""

from __future__ import annotations

from collections.abc import Mapping

from corral.core.cluster import Cluster, Placement, consolidated
from corral.core.jobs import Assignment, Decision, JobSpec

__all__ = ["within_one_type"]


def within_one_type(decision: Decision, cluster: Cluster,
                    specs: Mapping[str, JobSpec]) -> Decision:
    """`decision` with every job's GPUs on one GPU type (and on its `gpu_type`, if any).

    `specs` maps job names to their JobSpecs (only the decision's jobs are looked up, and only
    on a mixed cluster; a job absent from it is unrestricted). Returns `decision` itself when
    the cluster has one type or nothing needs to move; otherwise a new Decision, in the same
    job order, without the jobs that found no room. Assumes `decision` over-allocates no node.
    """
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
    for name in movers:
        a = decision.assignments[name]
        spec = specs.get(name)
        wanted = spec.gpu_type if spec is not None else None
        moved[name] = _replace(cluster, types, free, a, wanted,
                               spec.min_gpus if spec is not None else 1)
    out: dict[str, Assignment] = {}
    for name, a in decision.assignments.items():
        if name in moved:
            new = moved[name]
            if new is not None:
                out[name] = new
        else:
            out[name] = a
    return Decision(out)


def _replace(cluster: Cluster, types: tuple[str, ...], free: list[int], a: Assignment,
             wanted: str | None, min_gpus: int = 1) -> Assignment | None:
    """`a`'s GPU count and batch on one type with room (taken from `free`), or None; fewer GPUs
    when no type it may use has `a`'s count at all (step 3 of the module docstring)."""
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
