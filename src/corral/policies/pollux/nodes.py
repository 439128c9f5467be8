"""Which nodes a pollux round's search spans, so its cost follows the jobs, not the cluster.

A generation costs time in proportion to the nodes it spans, and empty nodes of one size are
interchangeable. On more than `SEARCH_ALL_NODES_UP_TO` nodes a round searches the nodes jobs
hold now, those its warm start uses, and per node size the lowest-numbered others until they
cover the jobs' summed caps plus one largest node. Left out are only allocations that spread
jobs thinner over empty nodes, which the fitness does not favour. The Pollux artifact searches
all nodes; smaller clusters are searched whole, draw for draw.
"""

from __future__ import annotations

from typing import cast

import numpy as np

__all__ = ["ARTIFACT_NODES", "SEARCH_ALL_NODES_UP_TO", "search_nodes", "move_columns"]

#: Clusters of at most this many nodes are searched whole (the artifact's search, unchanged).
SEARCH_ALL_NODES_UP_TO = 64

#: Clusters of at most this many nodes (the artifact's testbed: the stored reference figures)
#: are decided by the search alone, draw for draw; above it, jobs grow into idle GPUs
#: (`grow_idle`) and rounds no search could improve are not searched (`settled`).
ARTIFACT_NODES = 16


def search_nodes(node_gpus: np.ndarray, base: np.ndarray, max_gpus: np.ndarray,
                 seeded: np.ndarray | None = None) -> np.ndarray:
    """Sorted indices of the nodes to search (all of them on a small cluster).

    `base` is the (jobs, nodes) current allocation, `max_gpus` each job's cap, `seeded` the
    nodes the warm start's individuals use (node indices), if any.
    """
    count = len(node_gpus)
    if count <= SEARCH_ALL_NODES_UP_TO:
        return np.arange(count)
    node_gpus = np.asarray(node_gpus, dtype=np.int64)
    spanned = cast(np.ndarray, np.asarray(base).any(axis=0))  # (base is 2-D: an array)
    if seeded is not None and len(seeded):
        spanned[seeded] = True
    need = int(np.sum(max_gpus)) + int(node_gpus.max(initial=0))
    for size in np.unique(node_gpus):  # room of every node size, for jobs that fit one best
        of_size = node_gpus == size
        short = need - int(node_gpus[spanned & of_size].sum())
        if short > 0:
            empty = np.flatnonzero(~spanned & of_size)
            spanned[empty[: -(-short // int(size)) if size else 0]] = True
    return np.flatnonzero(spanned)


def move_columns(slots: np.ndarray, old_nodes: np.ndarray, new_nodes: np.ndarray,
                 node_gpus: np.ndarray, num_jobs: int) -> np.ndarray:
    """A slot-encoded population (individuals, len(old_nodes), C) over the nodes `old_nodes`,
    laid out over `new_nodes` instead: a node in both keeps its slots, a node new to the search
    is empty (FREE = `num_jobs` up to its size, BLOCK beyond). Nodes dropped must be empty in
    every individual (`search_nodes` keeps every node a seed uses)."""
    if np.array_equal(old_nodes, new_nodes):
        return slots
    node_gpus = np.asarray(node_gpus)
    width = slots.shape[2]
    out = np.full((slots.shape[0], len(new_nodes), width), num_jobs, dtype=slots.dtype)
    out[:, np.arange(width)[None, :] >= node_gpus[new_nodes][:, None]] = num_jobs + 1
    at = np.minimum(np.searchsorted(old_nodes, new_nodes), len(old_nodes) - 1)
    kept = old_nodes[at] == new_nodes
    out[:, kept] = slots[:, at[kept]]
    return out
