"""Whether a pollux round can change anything: if not, it is not searched (issue 45).

FITNESS_p (Eq. 14) is a power mean, increasing in every job's term. A job's term is its speedup
where it runs now, or, if the search moves it, its speedup elsewhere times its REALLOC_FACTOR
(below 1). When every job holds GPUs within the search's own limits (its GPU and node caps, its
minimum, at most one job spanning nodes on any node) and no job's speedup anywhere, times its
factor, is above its speedup now, no allocation has a higher fitness than the current one: a
search would keep it (it starts from it, and ties keep the earlier individual). That is an idle
cluster with nothing waiting and no job whose goodput would grow, and the round's answer is
known without drawing anything. The check reads every job's speedup table once: linear in the
jobs, not in the cluster. Taken on clusters of more than `SEARCH_ALL_NODES_UP_TO` nodes only:
a round not searched draws nothing, so every later draw would move, and on the artifact's
16-node clusters the search runs draw for draw as before (the stored reference figures).
"""

from __future__ import annotations

import numpy as np

from corral.policies.pollux.search import AllocationProblem

__all__ = ["settled"]


def settled(problem: AllocationProblem, max_nodes_per_job: int, avoid_interference: bool) -> bool:
    """True when the current allocation (`problem.base`) is the best any search could find
    (module docstring)."""
    base = np.asarray(problem.base)
    gpus = base.sum(axis=1)
    nodes = np.count_nonzero(base, axis=1)
    if (not len(gpus) or np.any(gpus < np.maximum(problem.min_gpus, 1))
            or np.any(gpus > problem.max_gpus) or np.any(nodes > max_nodes_per_job)):
        return False
    if avoid_interference and np.any(np.count_nonzero(base[nodes > 1], axis=0) > 1):
        return False
    table = problem.speedup
    width = table.width
    size = np.diff(np.append(table.offset, len(table.flat)))
    if np.any(nodes >= size // width):
        return False  # beyond the job's table: let the search judge
    now = table.flat[table.offset + nodes * width + gpus]
    # each job's best speedup within its caps (the search may not go beyond them)
    owner = np.repeat(np.arange(len(width)), size)
    row, col = np.divmod(np.arange(len(table.flat)) - table.offset[owner], width[owner])
    allowed = (col <= problem.max_gpus[owner]) & (row <= max_nodes_per_job)
    best = np.maximum.reduceat(np.where(allowed, table.flat, 0.0), table.offset)
    return bool(np.all(now >= best * np.asarray(problem.penalty)))
