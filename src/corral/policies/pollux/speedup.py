"""SPEEDUP_j(N, K) tables for the Pollux search (Pollux (OSDI'21) §4.2, Eq. 15).

SPEEDUP_j(N, K) = best goodput of job j on K GPUs over N nodes / best goodput on the fair share,
each "best" the Eq. 13 batch optimum (`corral.perf.goodput`). The search reads it millions of
times, so each round fills a dense (N, K) table per job: best goodputs are memoised per goodput
function object, missing entries come from one vectorised `best_goodputs` call (one per K for
all N >= 2: `DISTINCT_NODE_COUNTS`), and a table is kept until its inputs change.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from corral.perf.goodput import GoodputFunction, best_goodputs
from corral.perf.throughput import DISTINCT_NODE_COUNTS

__all__ = ["SpeedupGrids", "linear_speedups"]


def linear_speedups(max_nodes: int, max_gpus: int, fair_gpus: int) -> np.ndarray:
    """Perfect scaling (a job with no model yet): SPEEDUP = K / K_f for every N >= 1."""
    row = np.tile(np.arange(max_gpus + 1, dtype=float) / fair_gpus, (max_nodes + 1, 1))
    row[0] = 0.0
    return row


@lru_cache(maxsize=4096)
def _scaled_linear(max_nodes: int, max_gpus: int, fair_gpus: int, scale: float) -> np.ndarray:
    """`linear_speedups * scale`, shared by every job of that shape (read-only)."""
    table = linear_speedups(max_nodes, max_gpus, fair_gpus) * scale
    table.setflags(write=False)
    return table


class _Memo:
    __slots__ = ("fn", "values", "filled", "table_key", "table")

    def __init__(self, fn: GoodputFunction, rows: int, cols: int) -> None:
        self.fn = fn
        self.values = np.full((rows, cols), np.nan)
        self.values[:, 0] = 0.0
        self.values[0, :] = 0.0
        self.filled = (0, 0)  # values[:rows, :cols] of the last request hold no NaN
        #: the last finished speedup table and its (max_nodes, max_gpus, fair_nodes,
        #: fair_gpus, scale)
        self.table_key: tuple | None = None
        self.table = np.zeros((0, 0))

    def ensure(self, rows: int, cols: int) -> None:
        r0, c0 = self.values.shape
        if rows <= r0 and cols <= c0:
            return
        grown = np.full((max(rows, r0), max(cols, c0)), np.nan)
        grown[:, 0] = 0.0
        grown[0, :] = 0.0
        grown[:r0, :c0] = self.values
        self.values = grown
        self.table_key = None  # the fair-share row may now be another one


class SpeedupGrids:
    """Per-job memoised best-goodput grids; `tables` turns them into speedup tables."""

    def __init__(self) -> None:
        self._memo: dict[str, _Memo] = {}

    def forget_except(self, names: set[str]) -> None:
        for name in [n for n in self._memo if n not in names]:
            del self._memo[name]

    def tables(self, jobs: list[tuple[str, GoodputFunction | None, int, int]], fair_nodes: int,
               fair_gpus: int, scale: float = 1.0) -> list[np.ndarray]:
        """For each (name, goodput fn or None, max_nodes, max_gpus): the speedup table
        [N, K], N <= max_nodes, K <= max_gpus, relative to (fair_nodes, fair_gpus), times
        `scale`. The tables are read-only (shared between rounds and jobs)."""
        out: list[np.ndarray | None] = [None] * len(jobs)
        todo = []
        for i, (name, fn, max_nodes, max_gpus) in enumerate(jobs):
            if fn is None:
                out[i] = _scaled_linear(max_nodes, max_gpus, fair_gpus, scale)
                continue
            memo = self._memo.get(name)
            if (memo is not None and memo.fn is fn
                    and memo.table_key == (max_nodes, max_gpus, fair_nodes, fair_gpus, scale)):
                out[i] = memo.table  # same model, grid and fair share as last time
            else:
                todo.append(i)
        need_fn: list[GoodputFunction] = []
        which, nodes, gpus, owners = [], [], [], []
        copies: list[np.ndarray] = []  # grids whose rows N > 2 take row 2's values
        for i in todo:
            name, fn, max_nodes, max_gpus = jobs[i]
            assert fn is not None  # (todo: the jobs with a goodput function)
            memo = self._memo.get(name)
            rows, cols = max_nodes + 1, max(max_gpus, fair_gpus) + 1
            if memo is None or memo.fn is not fn:
                memo = self._memo[name] = _Memo(fn, rows, cols)
            memo.ensure(rows, cols)
            if rows <= memo.filled[0] and cols <= memo.filled[1]:
                continue
            memo.filled = (rows, cols)
            sub = memo.values[:rows, :cols]
            n_idx, k_idx = np.nonzero(np.isnan(sub))
            keep = n_idx <= k_idx
            if not keep.all():  # N > K is impossible: never asked for
                sub[n_idx[~keep], k_idx[~keep]] = 0.0
                n_idx, k_idx = n_idx[keep], k_idx[keep]
            several = n_idx >= DISTINCT_NODE_COUNTS  # the N = 2 value at that K (copied below)
            if several.any():
                copies.append(sub)
                n_idx, k_idx = n_idx[~several], k_idx[~several]
            if len(n_idx):
                which.append(np.full(len(n_idx), len(need_fn)))
                need_fn.append(fn)
                nodes.append(n_idx)
                gpus.append(k_idx)
                owners.append(memo)
        if need_fn:
            best = best_goodputs(need_fn, np.concatenate(which), np.concatenate(nodes),
                                  np.concatenate(gpus))
            at = 0
            for memo, n_idx, k_idx in zip(owners, nodes, gpus):
                memo.values[n_idx, k_idx] = best[at:at + len(n_idx)]
                at += len(n_idx)
        last = DISTINCT_NODE_COUNTS - 1
        for sub in copies:
            rest = sub[last + 1:]
            missing = np.isnan(rest)
            rest[missing] = np.broadcast_to(sub[last], rest.shape)[missing]
        for i in todo:
            name, _, max_nodes, max_gpus = jobs[i]
            memo = self._memo[name]
            key = (max_nodes, max_gpus, fair_nodes, fair_gpus, scale)
            if memo.table_key != key:
                memo.table, memo.table_key = self._speedups(memo.values, *key), key
            out[i] = memo.table
        return out  # type: ignore[return-value]

    @staticmethod
    def _speedups(values: np.ndarray, max_nodes: int, max_gpus: int, fair_nodes: int,
                  fair_gpus: int, scale: float) -> np.ndarray:
        """One job's speedup table from its best goodputs (read-only)."""
        base = values[min(fair_nodes, fair_gpus, values.shape[0] - 1), fair_gpus]
        if base <= 0:  # no batch fits the fair share: compare with the best on fewer GPUs
            k = np.arange(1, fair_gpus + 1)
            base = np.max(values[np.minimum(min(fair_nodes, values.shape[0] - 1), k), k])
        table = values[:max_nodes + 1, :max_gpus + 1]
        table = (table / base if base > 0 else table.copy()) * scale
        table.setflags(write=False)
        return table
