"""Waiting jobs onto the GPUs a pollux search left idle, where FITNESS_p (Eq. 14) gains.

On a crowded cluster (hundreds of jobs) the genetic search leaves GPUs idle while jobs wait:
its growth requests go to a few jobs per node in priority order and ask for up to the whole
node, so capacity repair evicts the node's later jobs instead of filling what is free (issue
45: 134 of 201 jobs on 157 of 290 GPUs). After the search, each job the best allocation leaves
out takes, in priority order, its current placement back if that is free (then it is
unchanged: no restart, no penalty), else its fewest GPUs (`min_gpus`, at least 1) on the
fullest node that has them. FITNESS_p is a power mean, increasing in every job's term, and
only the placed job's term moves, so a placement raises the fitness exactly when the job's
speedup there (times its penalty when changed) is above zero, its speedup left out; one that
would not (a job submitted this instant: REALLOC_FACTOR 0) is not made. Nothing is drawn.
"""

from __future__ import annotations

import numpy as np

from corral.policies.pollux.search import AllocationProblem

__all__ = ["fill_idle"]


def fill_idle(problem: AllocationProblem, jobs: np.ndarray, nodes: np.ndarray,
              gpus: np.ndarray, avoid_interference: bool = True
              ) -> list[tuple[int, int, int]]:
    """The (job, node, GPUs) entries to add to an allocation given as its nonzero (job, node,
    GPUs) entries, placing the jobs it leaves out on its idle GPUs where the fitness gains
    (module docstring); empty when there is nothing to place."""
    node_gpus = np.asarray(problem.node_gpus, dtype=np.int64)
    free = node_gpus - np.bincount(nodes, weights=gpus, minlength=len(node_gpus)).astype(np.int64)
    held = np.bincount(jobs, minlength=problem.num_jobs)
    waiting = np.flatnonzero(held == 0)
    added: list[tuple[int, int, int]] = []
    if not len(waiting) or free.max(initial=0) <= 0:
        return added
    # nodes holding a job that spans several (interference avoidance: at most one such job)
    shared = np.zeros(len(node_gpus), dtype=bool)
    shared[nodes[held[jobs] > 1]] = True
    for j in waiting.tolist():
        if free.max(initial=0) <= 0:
            break
        base = problem.base[j]
        on = np.flatnonzero(base)
        if len(on) and np.all(base[on] <= free[on]) and (
                len(on) == 1 or not avoid_interference or not shared[on].any()
        ) and _gains(problem, j, len(on), int(base.sum()), changed=False):
            added.extend((j, int(n), int(base[n])) for n in on)
            free[on] -= base[on]
            if len(on) > 1:
                shared[on] = True
            continue
        want = max(int(problem.min_gpus[j]), 1)
        fits = np.flatnonzero(free >= want)
        if not len(fits) or not _gains(problem, j, 1, want, changed=True):
            continue
        node = int(fits[np.argmin(free[fits])])  # the fullest node that fits: big holes stay
        added.append((j, node, want))
        free[node] -= want
    return added


def _gains(problem: AllocationProblem, j: int, nodes: int, gpus: int, changed: bool) -> bool:
    """Job j's speedup on `gpus` GPUs over `nodes` nodes, times its penalty when `changed`,
    is above its speedup left out (zero): its fitness term, and so FITNESS_p, rises."""
    grid = problem.speedup.grid(j)
    if gpus >= grid.shape[1] or nodes >= len(grid):
        return False  # beyond the job's caps: the search may not give it that either
    speedup = float(grid[nodes, gpus])
    return speedup * (float(problem.penalty[j]) if changed else 1.0) > 0.0
