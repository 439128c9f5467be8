"""Placement helpers shared by policies: where a job's GPUs go, given what is free."""

from __future__ import annotations

# consolidated lives in core (the GPU-type layer packs with it too); policies take it from here
from collections.abc import Callable, Sequence

from corral.core.cluster import Cluster, Placement, consolidated
from corral.core.jobs import Assignment, BatchConfig, Decision, JobView

#: Places `num_gpus` GPUs on the free GPUs per node (`consolidated`, `anywhere`); None: no room.
Placer = Callable[[list[int], int], Placement | None]


def free_gpus(cluster: Cluster, decision_so_far: Decision | dict) -> list[int]:
    """GPUs still free on each node after the assignments made so far."""
    assignments = decision_so_far.assignments if isinstance(decision_so_far, Decision) else decision_so_far
    free = list(cluster.gpus_per_node)
    for a in assignments.values():
        for node, gpus in a.placement.slots:
            free[node] -= gpus
    return free


def take(free: list[int], placement: Placement) -> None:
    """Mark a placement's GPUs as used in `free` (in place)."""
    for node, gpus in placement.slots:
        free[node] -= gpus


def anywhere(free: list[int], num_gpus: int) -> Placement | None:
    """Place `num_gpus` on any free GPUs, in node order (no consolidation), or None."""
    if num_gpus <= 0 or num_gpus > sum(free):
        return None
    slots: dict[int, int] = {}
    left = num_gpus
    for n, g in enumerate(free):
        if g and left:
            k = min(g, left)
            slots[n] = k
            left -= k
    return Placement.of(slots)


def fits(free: list[int], placement: Placement) -> bool:
    """Are `placement`'s GPUs all still free in `free`? (A loop: no generator per call.)"""
    for node, gpus in placement.slots:
        if free[node] < gpus:
            return False
    return True


def keep_or_place(free: list[int], current: Placement, num_gpus: int,
                  place: Placer = consolidated) -> Placement | None:
    """Keep a running job where it is when its size is unchanged (no restart), else place it."""
    if current and current.num_gpus == num_gpus and fits(free, current):
        return current
    return place(free, num_gpus)


def gang_allocate(cluster: Cluster, ordered: Sequence[JobView], gpus_of: Callable[[JobView], int],
                  *, place: Placer = consolidated, stop_at_first_miss: bool = False,
                  batch_of: Callable[[JobView, Placement], BatchConfig | None] | None = None,
                  place_of: Callable[[JobView], Placer] | None = None) -> dict:
    """Give each job in `ordered` (JobViews, highest priority first) all of its GPUs or none.

    Jobs are admitted by GPU count in priority order; admitted running jobs keep their current
    placement when its size is unchanged (no needless restart); the others are then placed with
    `place` (or, per job, with `place_of(view)` when given). `stop_at_first_miss` gives strict
    FIFO (head-of-line blocking). A job kept where it is with the batch it already has gets
    its view's own assignment back (an equal value; the engine then sees it unchanged at once).
    """
    capacity = cluster.total_gpus
    chosen = []
    for view in ordered:
        k = gpus_of(view)
        if 0 < k <= capacity:
            chosen.append((view, k))
            capacity -= k
        elif stop_at_first_miss:
            break
    free = list(cluster.gpus_per_node)
    out: dict = {}
    movers = []
    for view, k in chosen:
        shown = view.assignment
        cur = shown.placement if shown is not None else None
        if (shown is not None and cur is not None and cur.slots and cur.num_gpus == k
                and fits(free, cur)):
            take(free, cur)
            batch = batch_of(view, cur) if batch_of else None
            same = shown.batch is batch or shown.batch == batch
            out[view.spec.name] = shown if same else Assignment(cur, batch)
        else:
            movers.append((view, k))
    for view, k in movers:
        p = (place_of(view) if place_of is not None else place)(free, k)
        if p is None:
            if stop_at_first_miss:
                break
            continue
        take(free, p)
        out[view.name] = Assignment(p, batch_of(view, p) if batch_of else None)
    return out
