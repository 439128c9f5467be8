"""Running one-node jobs grown into the GPUs a pollux search left idle, where FITNESS_p gains.

On a cluster of hundreds of nodes with a hundred or more jobs, the genetic search cannot grow a
job by one step: a mutation there lets every job on a node with free GPUs ask for up to the
whole node, and capacity then goes by priority, so each offspring evicts dozens of jobs and
loses to the current allocation. Measured on Philly's busiest day on 256x8 (issue 45): 169 jobs
on 171 of 2,048 GPUs, each capped at 2 GPUs and running on 1, and the search (32 or 100
individuals, up to 300 generations) changed nothing, though growing any one job raises the
fitness; jobs `fill_idle` had placed at one GPU kept it for hours (average JCT 1,920 s against
984 s without fill, whose evictions re-placed jobs larger).

After the search (and `fill_idle`), each job on one node, in priority order, takes the GPU count
up to its cap (`max_gpus`, as the search's repair would cut it) with the best speedup among:
its node's idle GPUs (in place), another node that has them (the fullest that fits, so big
holes stay), or several empty nodes (largest first: nobody else there, so interference
avoidance holds). FITNESS_p is a power mean, increasing in every job's term, and only this
job's term moves: the fitness rises exactly when that speedup times its REALLOC_FACTOR is above
its term now (its speedup, times the factor if the search already changed it). Jobs already on
several nodes are left to the search. Nothing is drawn.
"""

from __future__ import annotations

import numpy as np

from corral.policies.pollux.search import AllocationProblem

__all__ = ["Slots", "grow_idle"]

#: A job's new GPUs: `(node, GPUs)` pairs.
Slots = tuple[tuple[int, int], ...]


def grow_idle(problem: AllocationProblem, jobs: np.ndarray, nodes: np.ndarray,
              gpus: np.ndarray, max_nodes: int = 1) -> dict[int, Slots]:
    """`{job: its new (node, GPUs) pairs}` for the one-node jobs of an allocation, given as its
    nonzero (job, node, GPUs) entries, that should grow (module docstring), spanning at most
    `max_nodes` nodes; empty when none gains."""
    node_gpus = np.asarray(problem.node_gpus, dtype=np.int64)
    free = node_gpus - np.bincount(nodes, weights=gpus, minlength=len(node_gpus)).astype(np.int64)
    grown: dict[int, Slots] = {}
    if free.max(initial=0) <= 0:
        return grown
    spans = np.bincount(jobs, minlength=problem.num_jobs)
    table = problem.speedup
    base = np.asarray(problem.base)
    by_size = np.argsort(-node_gpus, kind="stable")  # empty nodes are taken largest first
    empty: np.ndarray | None = None  # the empty nodes, largest first (None: to recount)
    for j, node, held in zip(jobs.tolist(), nodes.tolist(), gpus.tolist()):
        width = int(table.width[j])
        top = min(int(problem.max_gpus[j]), width - 1)
        if spans[j] != 1 or top <= held:
            continue
        most = int(free.max())
        room_away = most if free[node] < most else int(
            np.max(free, initial=0, where=np.arange(len(free)) != node))
        if max(int(free[node]), room_away) <= 0:
            continue
        if empty is None:
            empty = by_size[free[by_size] == node_gpus[by_size]]
        end = len(table.flat) if j + 1 == len(table) else int(table.offset[j + 1])
        rows = min(max_nodes, (end - int(table.offset[j])) // width - 1)
        row = table.flat[table.offset[j]: table.offset[j] + (rows + 1) * width].reshape(-1, width)
        options = _options(row, held, top, int(free[node]), room_away, node_gpus[empty])
        if not options:
            continue
        speedup, _, fewest, how = max(options)  # ties: in place, then one node; fewest GPUs
        penalty = float(problem.penalty[j])
        unchanged = base[j, node] == held and np.count_nonzero(base[j]) == 1
        if speedup * penalty <= float(row[1, held]) * (1.0 if unchanged else penalty):
            continue
        slots: Slots
        if how == "here":
            slots = ((node, -fewest),)
        elif how == "away":
            fits = np.flatnonzero(free >= -fewest)
            fits = fits[fits != node]
            slots = ((int(fits[np.argmin(free[fits])]), -fewest),)
        else:
            slots = _spread(-fewest, empty, node_gpus)
        grown[j] = slots
        free[node] += held
        for n, g in slots:
            free[n] -= g
        empty = None
        if free.max(initial=0) <= 0:
            break
    return grown


def _options(row: np.ndarray, held: int, top: int, room_here: int, room_away: int,
             empty_sizes: np.ndarray) -> list[tuple[float, int, int, str]]:
    """(speedup, preference, -GPUs, where) of the best count in each place a job holding `held`
    GPUs on one node may grow to: "here" (preferred on ties), "away" (one other node) or
    "spread" over several empty nodes (`empty_sizes`, largest first); `row[n, k]` is its
    speedup on k GPUs over n nodes."""
    out = []
    for how, preference, high in (("here", 2, min(top, held + room_here)),
                                  ("away", 1, min(top, room_away))):
        if high > held:
            k = held + 1 + int(np.argmax(row[1, held + 1: high + 1]))
            out.append((float(row[1, k]), preference, -k, how))
    reach = np.cumsum(empty_sizes)
    for m in range(2, min(len(row) - 1, len(reach)) + 1):
        low, high = max(held, int(reach[m - 2])) + 1, min(top, int(reach[m - 1]))
        if high >= low:  # counts that need exactly m of the empty nodes
            k = low + int(np.argmax(row[m, low: high + 1]))
            out.append((float(row[m, k]), 0, -k, "spread"))
    return out


def _spread(count: int, empty: np.ndarray, node_gpus: np.ndarray) -> tuple[tuple[int, int], ...]:
    """`count` GPUs over the empty nodes `empty` (largest first), each filled in turn."""
    slots = []
    for n in empty.tolist():
        if count <= 0:
            break
        take = min(count, int(node_gpus[n]))
        slots.append((n, take))
        count -= take
    return tuple(sorted(slots))
