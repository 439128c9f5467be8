"""Whether a pollux round can change anything: if not, it is not searched (issue 45).

FITNESS_p (Eq. 14) is a power mean, increasing in every job's term. A job's term is its speedup
where it runs now, or, if the allocation moves it, its speedup there times its REALLOC_FACTOR
(below 1); so no job's term can exceed the larger of its speedup now and its best speedup within
the search's limits (its GPU and node caps, and no more GPUs on n nodes than n of the largest
hold) times its factor. An allocation within those limits
(caps, minimum, at most one job spanning nodes on any node) that gives every job that largest
term has the highest fitness any allocation has: searching cannot beat it. Checked for the
current allocation (an idle cluster with nothing waiting and no job whose goodput would grow)
and for it with `fill_idle`'s placements and `grow_idle`'s growth applied (jobs that reach their
best on idle GPUs alone), and the round's answer is known without drawing anything. A job left
out has term 0, its best only when its factor is 0 (submitted this instant: placing it leaves
the fitness as it is). The check reads every job's speedup table
once: linear in the jobs, not in the cluster. Taken on clusters of more than
`ARTIFACT_NODES` nodes only: a round not searched draws nothing, so every later draw would
move, and on the artifact's 16-node clusters the search runs draw for draw as before (the
stored reference figures).
"""

from __future__ import annotations

import numpy as np

from corral.policies.pollux.search import AllocationProblem

__all__ = ["settled"]


def settled(problem: AllocationProblem, max_nodes_per_job: int, avoid_interference: bool,
            alloc: np.ndarray | None = None) -> bool:
    """True when `alloc` ((jobs, nodes) GPUs; the current allocation `problem.base` if None) is
    as good as any allocation a search could find (module docstring)."""
    base = np.asarray(problem.base)
    alloc = base if alloc is None else np.asarray(alloc)
    gpus = alloc.sum(axis=1)
    nodes = np.count_nonzero(alloc, axis=1)
    if (not len(gpus) or np.any((gpus > 0) & (gpus < problem.min_gpus))
            or np.any(gpus > problem.max_gpus) or np.any(nodes > max_nodes_per_job)):
        return False
    if avoid_interference and np.any(np.count_nonzero(alloc[nodes > 1], axis=0) > 1):
        return False
    table = problem.speedup
    width = table.width
    size = np.diff(np.append(table.offset, len(table.flat)))
    if np.any(nodes >= size // width):
        return False  # beyond the job's table: let the search judge
    penalty = np.asarray(problem.penalty)
    changed = (alloc != base).any(axis=1)
    # a job left out has term 0: at its best only if nothing would raise it (REALLOC_FACTOR 0)
    term = np.where(gpus > 0, table.flat[table.offset + nodes * width + gpus], 0.0) * np.where(
        changed, penalty, 1.0)
    base_gpus = base.sum(axis=1)
    base_nodes = np.count_nonzero(base, axis=1)
    # a job's term unchanged (0 if it holds nothing, or if its table stops short of that)
    stay = np.where((base_gpus > 0) & (base_nodes < size // width) & (base_gpus < width),
                    table.flat[table.offset + np.minimum(base_nodes * width + base_gpus,
                                                         size - 1)], 0.0)
    # each job's best speedup within its caps (the search may not go beyond them)
    owner = np.repeat(np.arange(len(width)), size)
    row, col = np.divmod(np.arange(len(table.flat)) - table.offset[owner], width[owner])
    widest = int(np.max(problem.node_gpus, initial=0))  # n nodes hold at most n x the largest
    allowed = (col <= problem.max_gpus[owner]) & (row <= max_nodes_per_job) & (col <= row * widest)
    best = np.maximum.reduceat(np.where(allowed, table.flat, 0.0), table.offset)
    return bool(np.all(term >= np.maximum(best * penalty, stay)))
