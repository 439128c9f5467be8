"""The batch candidates of Eq. 13 and their throughput, remembered per throughput model.

`GoodputFunction.optimize` picks, per allocation (N, K), the best of 50 candidate batches
(Pollux (OSDI'21) Eq. 13, §4.3). Candidates and their speed (Eq. 7-11) depend only on the
throughput model and batch limits, which change rarely; gradient statistics, which change each
epoch, enter through efficiency alone (Eq. 6). So candidate rows are kept per (model, limits,
N, K) in `CandidateCache` (bounded, LRU), and an optimisation computes only efficiencies; the
numbers are exactly those of the whole computation.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from corral.perf.throughput import ThroughputParams, iteration_time

__all__ = ["Candidates", "candidate_rows", "CandidateCache", "NUM_BATCH_CANDIDATES"]

#: Total batch sizes tried per allocation (the Pollux artifact's).
NUM_BATCH_CANDIDATES = 50
# Relative slack when rounding up divisions of float candidates, so that e.g. a total batch of
# 4096*(1+1e-16) over 4 GPUs is 1024 per GPU, not 1025 (or one more accumulation step).
_CEIL_SLACK = 1e-9


def _ceil(x: np.ndarray) -> np.ndarray:
    return np.ceil(x * (1.0 - _CEIL_SLACK))


@dataclass(frozen=True, slots=True)
class Candidates:
    """Candidate configurations of some (N, K) rows, one row each, W candidates per row."""

    #: (n, W) examples per second (total batch / iteration time); 0 where the candidate is
    #: not usable (outside the batch limits, no GPU, empty): its goodput is then 0 x a finite
    #: positive efficiency, the 0 the whole computation gives it.
    throughput: np.ndarray
    total: np.ndarray  # (n, W) total batch, 1 where empty (so efficiency stays finite)
    local_bsz: np.ndarray  # (n, W) per-GPU batch (integers)
    accum_steps: np.ndarray  # (n, W) extra accumulation micro-steps (integers)

    @property
    def size(self) -> int:
        return self.throughput.shape[0]

    def take(self, index: np.ndarray) -> Candidates:
        return Candidates(self.throughput[index], self.total[index], self.local_bsz[index],
                          self.accum_steps[index])

    @staticmethod
    def concat(parts: list[Candidates]) -> Candidates:
        width = max(p.throughput.shape[1] for p in parts)
        fields = []
        for name in Candidates.__slots__:
            arrays = [getattr(p, name) for p in parts]
            fields.append(np.concatenate([a if a.shape[1] == width else
                                          np.repeat(a, width, axis=1) for a in arrays]))
        return Candidates(*fields)


def candidate_rows(params: ThroughputParams, init_bsz: Any, max_bsz: Any, min_local: Any,
                   max_local: Any, accumulation: Any, nodes: np.ndarray,
                   gpus: np.ndarray) -> Candidates:
    """Eq. 13 candidates per row of flat float (nodes, gpus) and their throughput; the limits
    are scalars or (n, 1) columns (one job per row), as are the fields of params.

    A row whose batch is fixed (max_bsz <= init_bsz) has one candidate, repeated when rows of
    adaptive jobs are computed with it (the best of equal candidates is the first)."""
    k = np.maximum(gpus, 1.0)[:, None]  # (n, 1); K = 0 rows are unusable
    max_total = np.maximum(max_bsz, init_bsz) * 1.0  # max_bsz <= M0: fixed at M0
    fixed = np.less_equal(max_bsz, init_bsz)
    if np.all(fixed):
        totals = np.broadcast_to(max_total, (gpus.size, 1)).astype(float)
    else:
        lo = np.maximum(np.asarray(init_bsz, dtype=float), min_local * k)  # (n, 1)
        hi = np.broadcast_to(max_total, lo.shape)
        totals = np.geomspace(lo[:, 0], hi[:, 0], NUM_BATCH_CANDIDATES, axis=1)
        if np.any(fixed):
            totals = np.where(fixed, max_total, totals)
    per_gpu = totals / k
    accum = np.maximum(_ceil(per_gpu / max_local) - 1.0, 0.0)
    # One GPU above M0: force a micro-step split (the artifact's rule: its gradient
    # statistics need >= 2 samples per step to scale the learning rate).
    accum = np.where((k == 1) & (per_gpu > init_bsz), np.maximum(accum, 1.0), accum)
    accum = np.where(accumulation, accum, 0.0)
    local = _ceil(per_gpu / (accum + 1.0))
    local = np.minimum(local, np.floor(max_total / (k * (accum + 1.0))))  # simulator cap
    feasible = (local >= min_local) & (local <= max_local) & (gpus > 0)[:, None]
    run_local = np.maximum(local, 1.0)
    total = k * run_local * (accum + 1.0)
    t_iter = np.asarray(iteration_time(params, nodes[:, None], k, run_local, accum))
    nonempty = total > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        throughput = total / t_iter
    counts = np.int32 if np.max(max_total) < 2 ** 31 else np.int64
    return Candidates(np.where(feasible & nonempty, throughput, 0.0),
                      np.where(nonempty, total, 1.0), local.astype(counts), accum.astype(counts))


class _ModelRows:
    """The rows computed for one cache key: a dense (N, K) -> row index and the rows."""

    __slots__ = ("index", "rows")

    def __init__(self) -> None:
        self.index = np.full((1, 1), -1, dtype=np.int64)
        self.rows: Candidates | None = None

    @property
    def size(self) -> int:
        return 0 if self.rows is None else self.rows.size

    def add(self, nodes: np.ndarray, gpus: np.ndarray, rows: Candidates) -> None:
        shape = (max(self.index.shape[0], int(nodes.max()) + 1),
                 max(self.index.shape[1], int(gpus.max()) + 1))
        if shape != self.index.shape:
            grown = np.full(shape, -1, dtype=np.int64)
            grown[:self.index.shape[0], :self.index.shape[1]] = self.index
            self.index = grown
        self.index[nodes, gpus] = np.arange(self.size, self.size + nodes.size)
        self.rows = rows if self.rows is None else Candidates.concat([self.rows, rows])

    def lookup(self, nodes: np.ndarray, gpus: np.ndarray) -> np.ndarray:
        """Row index of each (N, K), -1 where not computed yet."""
        inside = (nodes < self.index.shape[0]) & (gpus < self.index.shape[1])
        if inside.all():
            return self.index[nodes, gpus]
        return np.where(inside, self.index[np.where(inside, nodes, 0), np.where(inside, gpus, 0)],
                        -1)


class CandidateCache:
    """Candidate rows by (key, N, K), the key naming a throughput model, batch limits and the
    form of the computation; at most `max_rows` rows, the least recently used keys dropped
    first."""

    def __init__(self, max_rows: int = 40_000) -> None:
        self.max_rows = max_rows
        self._models: OrderedDict[Any, _ModelRows] = OrderedDict()
        self._rows = 0

    def rows(self, key: Any, nodes: np.ndarray, gpus: np.ndarray,
             compute: Callable[[np.ndarray, np.ndarray], Candidates]) -> Candidates:
        """The candidates of each (nodes[i], gpus[i]) (non-negative integer arrays) under `key`;
        rows not seen before are computed by `compute(nodes, gpus)` (float arrays) at once."""
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = _ModelRows()
        else:
            self._models.move_to_end(key)
        at = model.lookup(nodes, gpus)
        missing = at < 0
        if missing.any():
            pairs = np.unique(np.stack([nodes[missing], gpus[missing]], axis=1), axis=0)
            before = model.size
            model.add(pairs[:, 0], pairs[:, 1],
                      compute(pairs[:, 0].astype(float), pairs[:, 1].astype(float)))
            self._rows += model.size - before
            at = model.lookup(nodes, gpus)
            self._evict(keep=key)
        assert model.rows is not None
        return model.rows.take(at)

    def row(self, key: Any, nodes: int, gpus: int,
            compute: Callable[[np.ndarray, np.ndarray], Candidates]) -> Candidates:
        """`rows` of one (nodes, gpus) pair, as 1-d arrays of its W candidates: a job's own
        batch choice asks for one allocation at every epoch end, where the array plumbing of
        `rows` cost more than the lookup."""
        model = self._models.get(key)
        if model is not None and model.rows is not None:
            index = model.index
            if nodes < index.shape[0] and gpus < index.shape[1]:
                at = int(index[nodes, gpus])
                if at >= 0:
                    self._models.move_to_end(key)
                    rows = model.rows
                    return Candidates(rows.throughput[at], rows.total[at], rows.local_bsz[at],
                                      rows.accum_steps[at])
        one = self.rows(key, np.array([nodes]), np.array([gpus]), compute)
        return Candidates(one.throughput[0], one.total[0], one.local_bsz[0], one.accum_steps[0])

    def _evict(self, keep: Any) -> None:
        while self._rows > self.max_rows and len(self._models) > 1:
            key, model = next(iter(self._models.items()))
            if key == keep:
                break
            del self._models[key]
            self._rows -= model.size

    def clear(self) -> None:
        self._models.clear()
        self._rows = 0
