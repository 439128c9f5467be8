"""Small integer lists stored column-wise: sorting networks, merges and runs, with numpy.

The Pollux search keeps each node's GPU slots as a short sorted list (one entry per GPU, see
`corral.policies.pollux.search`). Stored slot-major, as an array `X` of shape (C, ...) whose `X[c]` holds slot
`c` of every list, each step below is a handful of operations on contiguous arrays, where
`np.sort(..., axis=-1)` on many short rows costs about 30 ns per element. Integer results are
exact, so any correct sort gives the same lists.
"""

from __future__ import annotations

from functools import cache

import numpy as np

__all__ = ["sort_network", "sort_columns", "merge_smallest", "extend_runs", "pick",
           "run_starts", "position_in_run", "count_true"]


@cache
def sort_network(width: int) -> tuple[tuple[int, int], ...]:
    """Comparators (i, k), i < k, of Batcher's odd-even merge sort for `width` inputs: after
    `x[i], x[k] = min, max` for each in turn, x is sorted. Built for the next power of two;
    comparators touching the (conceptually +inf) padding are no-ops and left out."""
    n = 1
    while n < width:
        n *= 2
    pairs = []
    p = 1
    while p < n:
        k = p
        while k >= 1:
            for j in range(k % p, n - k, 2 * k):
                for i in range(min(k, n - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p) and i + j + k < width:
                        pairs.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return tuple(pairs)


def sort_columns(x: np.ndarray) -> np.ndarray:
    """Sort every list of `x` (C, ...) along axis 0 (in place; returns x)."""
    for i, k in sort_network(len(x)):
        lo = np.minimum(x[i], x[k])
        np.maximum(x[i], x[k], out=x[k])
        x[i] = lo
    return x


def merge_smallest(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The len(a) smallest of two sorted column lists of one length, sorted (a new array):
    min(a[i], b[C-1-i]) picks them (a bitonic sequence), the network sorts them."""
    return sort_columns(np.minimum(a, b[::-1]))


def extend_runs(x: np.ndarray, add: np.ndarray) -> np.ndarray:
    """The len(x) first entries of the lists `x` (C, ...) after each run of equal values that
    starts at slot s gains `add[s]` more copies of its value (`add` is 0 elsewhere), in place
    of merging a block of those copies: where the runs move (slot s + the copies added before
    it), then for every slot the last run that starts at or before it. A new array."""
    start = np.empty(x.shape, dtype=np.int16)  # at most C + C * C for C-slot lists
    moved = np.zeros(x.shape[1:], dtype=np.int16)
    for s in range(len(x)):
        start[s] = moved + s
        moved += add[s]
    out = np.empty_like(x)
    for c in range(len(x)):  # start[s] >= s: only runs starting at s <= c can cover slot c
        o = x[0]
        for s in range(1, c + 1):
            o = pick(start[s] <= c, x[s], o)
        out[c] = o
    return out


def pick(mask: np.ndarray, a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    """np.where(mask, a, b) for integers, by arithmetic (np.where is several times slower on
    the unpredictable masks of a GA)."""
    return b + mask * (a - b)


def run_starts(x: np.ndarray) -> np.ndarray:
    """True at the first entry of each run of equal values along axis 0."""
    first = np.empty(x.shape, dtype=bool)
    first[0] = True
    np.not_equal(x[1:], x[:-1], out=first[1:])
    return first


def position_in_run(starts: np.ndarray) -> np.ndarray:
    """Each entry's offset from the first entry of its run (`starts` from `run_starts`)."""
    pos = np.zeros(starts.shape, dtype=np.int16)
    for c in range(1, len(starts)):
        np.multiply(pos[c - 1] + 1, ~starts[c], out=pos[c])
    return pos


def count_true(mask: np.ndarray) -> np.ndarray:
    """Number of True along axis 0 (slice adds over contiguous columns), as int16."""
    out = mask[0].astype(np.int16)
    for c in range(1, len(mask)):
        out += mask[c]
    return out
