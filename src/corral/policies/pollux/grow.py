"""Running jobs grown into the GPUs a pollux search left idle, where FITNESS_p gains.

On a cluster of hundreds of nodes with a hundred or more jobs, the genetic search cannot grow a
job by one step: a mutation there lets every job on a node with free GPUs ask for up to the
whole node, and capacity then goes by priority, so each offspring evicts dozens of jobs and
loses to the current allocation. Measured on Philly's busiest day on 256x8 (issue 45): 169 jobs
on 171 of 2,048 GPUs, each capped at 2 GPUs and running on 1, and the search (32 or 100
individuals, up to 300 generations) changed nothing, though growing any one job raises the
fitness; jobs `fill_idle` had placed at one GPU kept it for hours (average JCT 1,920 s against
984 s without fill, whose evictions re-placed jobs larger).

After the search (and `fill_idle`), each running job, in priority order, takes the GPU count
above its own, up to its cap (`max_gpus`, as the search's repair would cut it), with the best
speedup among: its node's idle GPUs (in place, a job on one node), another node that has them
(the fullest that fits, so big holes stay), or several empty nodes (largest first: nobody else
there, so interference avoidance holds); a job that moves frees the GPUs it held. FITNESS_p is
a power mean, increasing in every job's term, and only this job's term moves: the fitness
rises exactly when that speedup times its REALLOC_FACTOR is above its term now (its speedup,
times the factor if the search already changed it). Nothing is drawn.
"""

from __future__ import annotations

import numpy as np

from corral.policies.pollux.search import AllocationProblem

__all__ = ["Slots", "grow_idle"]

#: A job's new GPUs: `(node, GPUs)` pairs.
Slots = tuple[tuple[int, int], ...]


def grow_idle(problem: AllocationProblem, jobs: np.ndarray, nodes: np.ndarray,
              gpus: np.ndarray, max_nodes: int = 1) -> dict[int, Slots]:
    """`{job: its new (node, GPUs) pairs}` for the jobs of an allocation, given as its nonzero
    (job, node, GPUs) entries by job, that should grow (module docstring), spanning at most
    `max_nodes` nodes; empty when none gains."""
    node_gpus = np.asarray(problem.node_gpus, dtype=np.int64)
    free = node_gpus - np.bincount(nodes, weights=gpus, minlength=len(node_gpus)).astype(np.int64)
    grown: dict[int, Slots] = {}
    if free.max(initial=0) <= 0:
        return grown
    table = problem.speedup
    base = np.asarray(problem.base)
    by_size = np.argsort(-node_gpus, kind="stable")  # empty nodes are taken largest first
    empty: np.ndarray | None = None  # the empty nodes, largest first (None: to recount)
    starts = np.flatnonzero(np.diff(jobs, prepend=-1))  # each job's first entry
    for first, last in zip(starts.tolist(), [*starts[1:].tolist(), len(jobs)]):
        j = int(jobs[first])
        on, counts = nodes[first:last], gpus[first:last]
        held, spans = int(counts.sum()), last - first
        width = int(table.width[j])
        top = min(int(problem.max_gpus[j]), width - 1)
        if top <= held:
            continue
        here = int(free[on[0]]) if spans == 1 else 0  # room to grow in place (one node only)
        outside = np.ones(len(free), dtype=bool)
        outside[on] = False
        room_away = int(np.max(free, initial=0, where=outside))
        if max(here, room_away) <= 0:
            continue
        if empty is None:
            empty = by_size[free[by_size] == node_gpus[by_size]]
        row = table.grid(j)[: max_nodes + 1]
        if spans >= len(row):
            continue  # beyond its table (or `max_nodes`): the search's to judge
        options = _options(row, held, top, here, room_away, node_gpus[empty])
        if not options:
            continue
        speedup, _, fewest, how = max(options)  # ties: in place, then one node; fewest GPUs
        penalty = float(problem.penalty[j])
        unchanged = (np.count_nonzero(base[j]) == spans and np.array_equal(base[j, on], counts))
        if speedup * penalty <= float(row[spans, held]) * (1.0 if unchanged else penalty):
            continue
        slots: Slots
        if how == "here":
            slots = ((int(on[0]), -fewest),)
        elif how == "away":
            fits = np.flatnonzero((free >= -fewest) & outside)
            slots = ((int(fits[np.argmin(free[fits])]), -fewest),)
        else:
            slots = _spread(-fewest, empty, node_gpus)
        grown[j] = slots
        free[on] += counts
        for n, g in slots:
            free[n] -= g
        empty = None
        if free.max(initial=0) <= 0:
            break
    return grown


def _options(row: np.ndarray, held: int, top: int, room_here: int, room_away: int,
             empty_sizes: np.ndarray) -> list[tuple[float, int, int, str]]:
    """(speedup, preference, -GPUs, where) of the best count in each place a job holding `held`
    GPUs may grow to: "here" (on its one node; preferred on ties), "away" (one other node) or
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
