"""Goodput = throughput x statistical efficiency, its best batch per allocation, and speedups.

Both sides of co-adaptation use a job's goodput function (Pollux (OSDI'21) Eq. 4): the job
picks the best (per-GPU batch m, accumulation steps s) for its GPUs (Eq. 13, §4.3) and the
scheduler compares allocations by the best goodput each allows (SPEEDUP, Eq. 15). Candidates
(`corral.perf.candidates`): 50 geometric total batches, fewest accumulation steps, s >= 1 on a
single GPU, the Pollux simulator's cap on m.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from corral.perf.candidates import NUM_BATCH_CANDIDATES, CandidateCache, Candidates, candidate_rows
from corral.perf.efficiency import GradStats, efficiency
from corral.perf.throughput import DISTINCT_NODE_COUNTS, ThroughputParams, iteration_time

__all__ = ["GoodputFunction", "SpeedupFunction", "NUM_BATCH_CANDIDATES", "optimize_many",
           "best_goodputs"]

# Candidate rows remembered per throughput model and batch limits (corral.perf.candidates):
# one cache for one job's optimisations (scalar parameters), one for many jobs' at once (the
# parameters as columns, as `optimize_many` has always computed them).
_ONE_JOB = CandidateCache()
_MANY_JOBS = CandidateCache()


def _is_scalar(*xs: Any) -> bool:
    return all(np.ndim(x) == 0 for x in xs)


class GoodputFunction:
    """GOODPUT(N, K, m, s) of one job, from its throughput model and gradient statistics.

    `init_bsz` is M0 (efficiency 1), `max_bsz` the largest total batch allowed (at or below M0
    means a batch fixed at M0), `[min_local_bsz, max_local_bsz]` the per-GPU batch range (the upper
    end is the GPU-memory limit); `accumulation` allows accumulation micro-steps.
    """

    __slots__ = ("params", "stats", "init_bsz", "max_bsz", "min_local_bsz", "max_local_bsz",
                 "accumulation", "_model_key")

    def __init__(self, params: ThroughputParams, stats: GradStats, init_bsz: int, max_bsz: int,
                 min_local_bsz: int, max_local_bsz: int, accumulation: bool = True) -> None:
        if init_bsz < 1 or max_bsz < 1:
            raise ValueError(f"batch sizes must be >= 1 (init_bsz={init_bsz}, max_bsz={max_bsz})")
        if not 1 <= min_local_bsz <= max_local_bsz:
            raise ValueError(f"need 1 <= min_local_bsz <= max_local_bsz, got "
                             f"{min_local_bsz}, {max_local_bsz}")
        self.params = params
        self.stats = stats
        self.init_bsz = int(init_bsz)
        self.max_bsz = int(max_bsz)
        self.min_local_bsz = int(min_local_bsz)
        self.max_local_bsz = int(max_local_bsz)
        self.accumulation = bool(accumulation)
        self._model_key: tuple | None = None

    def model_key(self) -> tuple:
        """What the batch candidates and their throughput depend on: the exact bits of the
        throughput model and the batch limits (not the gradient statistics)."""
        if self._model_key is None:
            p = self.params
            self._model_key = (struct.pack("<7d", p.alpha_grad, p.beta_grad, p.alpha_local,
                                           p.beta_local, p.alpha_node, p.beta_node, p.gamma),
                               self.init_bsz, self.max_bsz, self.min_local_bsz,
                               self.max_local_bsz, self.accumulation)
        return self._model_key

    def __repr__(self) -> str:
        return (f"GoodputFunction({self.params}, {self.stats}, init_bsz={self.init_bsz}, "
                f"max_bsz={self.max_bsz}, local_bsz=[{self.min_local_bsz}, "
                f"{self.max_local_bsz}], accumulation={self.accumulation})")

    def throughput(self, num_nodes: ArrayLike, num_gpus: ArrayLike, local_bsz: ArrayLike,
                   accum_steps: ArrayLike) -> Any:
        """Examples per second (Eq. 7); 0 for an empty allocation."""
        total = (np.asarray(num_gpus, dtype=float) * np.asarray(local_bsz, dtype=float)
                 * (np.asarray(accum_steps, dtype=float) + 1.0))
        t_iter = np.asarray(iteration_time(self.params, num_nodes, num_gpus, local_bsz,
                                           accum_steps))
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(total > 0, total / t_iter, 0.0)
        return out[()] if out.ndim == 0 else out

    def efficiency(self, total_bsz: ArrayLike) -> Any:
        """Statistical efficiency of a total batch relative to M0 (Eq. 6)."""
        return efficiency(self.stats, self.init_bsz, total_bsz)

    def goodput(self, num_nodes: ArrayLike, num_gpus: ArrayLike, local_bsz: ArrayLike,
                accum_steps: ArrayLike) -> Any:
        """Useful examples per second, in M0-equivalents (Eq. 4); 0 for an empty allocation."""
        out = _goodput(self.params, self.stats, self.init_bsz, num_nodes, num_gpus, local_bsz,
                       accum_steps)
        return out[()] if out.ndim == 0 else out

    def optimize(self, num_nodes: ArrayLike, num_gpus: ArrayLike) -> tuple[Any, Any, Any]:
        """Best (goodput, local_bsz, accum_steps) for each allocation (Pollux Eq. 13, §4.3).

        Scalars in give python (float, int, int); arrays (broadcast together) give arrays of
        their shape. An allocation with 0 GPUs, or one no allowed batch fits (e.g. more GPUs
        than max_bsz / min_local_bsz), gives goodput 0 with local_bsz 0 and accum_steps 0.
        """
        if type(num_nodes) is int and type(num_gpus) is int and num_nodes >= 0 and num_gpus >= 0:
            return self._optimize_one(num_nodes, num_gpus)
        scalar = _is_scalar(num_nodes, num_gpus)
        nodes, gpus = np.broadcast_arrays(np.asarray(num_nodes, dtype=float),
                                          np.asarray(num_gpus, dtype=float))
        shape = nodes.shape
        nodes, gpus = nodes.ravel(), gpus.ravel()
        _check_counts(nodes, gpus)
        counts = _as_counts(nodes, gpus)
        cands = (self._candidates(nodes, gpus) if counts is None
                 else _ONE_JOB.rows(self.model_key(), *counts, self._candidates))
        best, local_bsz, accum = _best(cands, self.stats, self.init_bsz)
        if scalar:
            return float(best[0]), int(local_bsz[0]), int(accum[0])
        return best.reshape(shape), local_bsz.reshape(shape), accum.reshape(shape)

    def _candidates(self, nodes: np.ndarray, gpus: np.ndarray) -> Candidates:
        """Eq. 13 candidate rows of flat float (nodes, gpus) under this job's model."""
        return candidate_rows(self.params, self.init_bsz, self.max_bsz, self.min_local_bsz,
                              self.max_local_bsz, self.accumulation, nodes, gpus)

    def _optimize_one(self, num_nodes: int, num_gpus: int) -> tuple[float, int, int]:
        """`optimize` of one allocation given as Python ints (the agent's batch choice at every
        epoch end): the same candidates and arithmetic on one row, without the array plumbing."""
        cands = _ONE_JOB.row(self.model_key(), min(num_nodes, DISTINCT_NODE_COUNTS - 1),
                             num_gpus, self._candidates)
        good = _goodputs(cands, self.stats, self.init_bsz)
        pick = int(np.argmax(good))
        best = float(good[pick])
        if not best > 0:
            return best, 0, 0
        return best, int(cands.local_bsz[pick]), int(cands.accum_steps[pick])


def optimize_many(fns: Sequence[GoodputFunction], which: ArrayLike, num_nodes: ArrayLike,
                  num_gpus: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eq. 13 for many jobs in one vectorised pass: row i is `fns[which[i]]` on
    (num_nodes[i], num_gpus[i]). Same results as `fns[which[i]].optimize(...)`, as flat arrays
    (best goodput, local_bsz, accum_steps); a scheduler filling many jobs' speedup tables at
    once pays numpy's per-call overhead once instead of once per job. Each job's candidate
    rows are remembered per throughput model, so a job whose gradient statistics changed
    (every round, for a running job) costs only its efficiencies."""
    idx = np.asarray(which, dtype=np.int64).ravel()
    nodes = np.asarray(num_nodes, dtype=float).ravel()
    gpus = np.asarray(num_gpus, dtype=float).ravel()
    if not (idx.size == nodes.size == gpus.size):
        raise ValueError("optimize_many: which, num_nodes and num_gpus must have equal sizes")
    if idx.size == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    _check_counts(nodes, gpus)
    stats = np.array([(fn.stats.sqr, fn.stats.var) for fn in fns])
    init = np.array([float(fn.init_bsz) for fn in fns])
    counts = _as_counts(nodes, gpus)
    if counts is None:
        cands, order = _column_candidates(fns, idx, nodes, gpus), None
    else:
        order = np.argsort(idx, kind="stable")
        firsts = np.flatnonzero(np.diff(idx[order], prepend=-1))
        parts = []
        for rows in np.split(order, firsts[1:]):
            fn_i = idx[rows[0]]

            def compute(n: np.ndarray, k: np.ndarray, fn: GoodputFunction = fns[fn_i]
                        ) -> Candidates:
                return _column_candidates([fn], np.zeros(n.size, np.int64), n, k)
            parts.append(_MANY_JOBS.rows(fns[fn_i].model_key(), counts[0][rows], counts[1][rows],
                                         compute))
        cands, idx = Candidates.concat(parts), idx[order]
    # columns of statistics: GradStats holds floats, but `efficiency` broadcasts over arrays
    columns = GradStats(sqr=stats[idx, 0:1], var=stats[idx, 1:2])  # type: ignore[arg-type]
    best, local, accum = _best(cands, columns, init[idx, None])
    if order is None:
        return best, local, accum
    out = (np.empty_like(best), np.empty_like(local), np.empty_like(accum))
    for o, v in zip(out, (best, local, accum)):
        o[order] = v
    return out


def _inputs(fn: GoodputFunction) -> tuple:
    """Everything a goodput function's optimum depends on: its throughput model (the object:
    jobs with the same fitted profile share the memoised fit), the exact bytes of its gradient
    statistics, its batch limits."""
    return (id(fn.params), struct.pack("<dd", fn.stats.sqr, fn.stats.var), fn.init_bsz,
            fn.max_bsz, fn.min_local_bsz, fn.max_local_bsz, fn.accumulation)


def best_goodputs(fns: list[GoodputFunction], which: np.ndarray, nodes: np.ndarray,
                   gpus: np.ndarray) -> np.ndarray:
    """`optimize_many(...)[0]`, each distinct (inputs, N, K) computed once: jobs of one
    application that ran the same configurations have identical goodput functions (the
    2,000 jobs of a t=0 round have a few dozen), and a row's result depends on its own
    inputs only. What the Pollux and Sia policies fill their goodput tables with."""
    ids: dict[tuple, int] = {}
    fn_id = np.array([ids.setdefault(_inputs(fn), len(ids)) for fn in fns], dtype=np.int64)
    if len(ids) == len(fns):
        return optimize_many(fns, which, nodes, gpus)[0]
    reps = [fns[i] for i in np.unique(fn_id, return_index=True)[1]]  # one per distinct id
    rep = fn_id[which]
    rows = (rep * (nodes.max() + 1) + nodes) * (gpus.max() + 1) + gpus
    _, first, back = np.unique(rows, return_index=True, return_inverse=True)
    return optimize_many(reps, rep[first], nodes[first], gpus[first])[0][back]


def _column_candidates(fns: Sequence[GoodputFunction], idx: np.ndarray, nodes: np.ndarray,
                       gpus: np.ndarray) -> Candidates:
    """Candidate rows of `fns[idx[i]]` on (nodes[i], gpus[i]), the parameters and limits as
    (n, 1) columns."""
    theta = np.array([fn.params.as_array() for fn in fns])[idx]
    lim = np.array([(fn.init_bsz, fn.max_bsz, fn.min_local_bsz, fn.max_local_bsz,
                     fn.accumulation) for fn in fns], dtype=float)[idx]
    params = ThroughputParams(*(theta[:, i:i + 1] for i in range(theta.shape[1])))
    return candidate_rows(params, lim[:, 0:1], lim[:, 1:2], lim[:, 2:3], lim[:, 3:4],
                          lim[:, 4:5] > 0, nodes, gpus)


def _as_counts(nodes: np.ndarray, gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(nodes, gpus) as the integer keys of remembered candidate rows, nodes as the model
    tells them apart (0, 1, several: `DISTINCT_NODE_COUNTS`, the same rows); None when some
    are not whole numbers (computed afresh, never remembered)."""
    n, k = nodes.astype(np.int64), gpus.astype(np.int64)
    if np.array_equal(n, nodes) and np.array_equal(k, gpus):
        return np.minimum(n, DISTINCT_NODE_COUNTS - 1), k
    return None


def _goodput(params: ThroughputParams, stats: GradStats, init_bsz: Any, num_nodes: ArrayLike,
             num_gpus: ArrayLike, local_bsz: ArrayLike, accum_steps: ArrayLike) -> np.ndarray:
    """Eq. 4 (throughput x efficiency); params, stats and init_bsz may hold column arrays."""
    total = (np.asarray(num_gpus, dtype=float) * np.asarray(local_bsz, dtype=float)
             * (np.asarray(accum_steps, dtype=float) + 1.0))
    t_iter = np.asarray(iteration_time(params, num_nodes, num_gpus, local_bsz, accum_steps))
    safe = np.where(total > 0, total, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        eff = np.asarray(efficiency(stats, init_bsz, safe))
        return np.where(total > 0, total / t_iter * eff, 0.0)


def _check_counts(nodes: np.ndarray, gpus: np.ndarray) -> None:
    if np.any(gpus < 0) or np.any(nodes < 0):
        raise ValueError("numbers of nodes and GPUs must be >= 0")


def _goodputs(cands: Candidates, stats: GradStats, init_bsz: Any) -> np.ndarray:
    """Goodput of every candidate (Eq. 4): throughput x efficiency at its total batch."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return cands.throughput * np.asarray(efficiency(stats, init_bsz, cands.total))


def _best(cands: Candidates, stats: GradStats, init_bsz: Any
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(goodput, local_bsz, accum_steps) of each row's best candidate (Eq. 4, 13): throughput
    x efficiency at the candidate's total batch; all 0 where no candidate is usable."""
    good = _goodputs(cands, stats, init_bsz)
    pick = np.argmax(good, axis=1)
    rows = np.arange(good.shape[0])
    best = good[rows, pick]
    ok = best > 0
    return (best, np.where(ok, cands.local_bsz[rows, pick], 0).astype(np.int64),
            np.where(ok, cands.accum_steps[rows, pick], 0).astype(np.int64))


class SpeedupFunction:
    """Goodput of an allocation (N,K) relative to a base allocation, memoised; for schedulers that call it millions of times.

    Values live in a dense (nodes x GPUs) table grown on demand; a call computes only the
    pairs never seen before, all in one vectorised `optimize`. If the base allocation admits no
    batch at all (more GPUs than max_bsz/min_local_bsz), the base is the largest GPU count up
    to `base_gpus` that does, so speedups stay finite.
    """

    __slots__ = ("goodput_fn", "base_nodes", "base_gpus", "base_goodput", "_table")

    def __init__(self, goodput_fn: GoodputFunction, base_nodes: int, base_gpus: int) -> None:
        if base_gpus < 1 or base_nodes < 1:
            raise ValueError(f"base allocation needs >= 1 node and GPU, got "
                             f"({base_nodes}, {base_gpus})")
        self.goodput_fn = goodput_fn
        base_nodes, base_gpus = int(base_nodes), int(base_gpus)
        base = goodput_fn.optimize(base_nodes, base_gpus)[0]
        if base <= 0:
            gpus = np.arange(1, base_gpus + 1)
            good = goodput_fn.optimize(np.minimum(base_nodes, gpus), gpus)[0]
            if not np.any(good > 0):
                raise ValueError(f"{goodput_fn!r} admits no batch on 1..{base_gpus} GPUs")
            base_gpus = int(gpus[np.flatnonzero(good > 0)[-1]])
            base_nodes = min(base_nodes, base_gpus)
            base = float(good[base_gpus - 1])
        self.base_nodes = base_nodes
        self.base_gpus = base_gpus
        self.base_goodput = float(base)
        self._table = np.full((max(base_nodes, 16) + 1, max(base_gpus, 64) + 1), np.nan)
        self._table[:, 0] = 0.0

    def __call__(self, num_nodes: ArrayLike, num_gpus: ArrayLike) -> Any:
        table = self._table
        if type(num_nodes) is int and type(num_gpus) is int:  # fast path for scalar loops
            if 0 <= num_nodes < table.shape[0] and 0 <= num_gpus < table.shape[1]:
                v = table[num_nodes, num_gpus]
                if v == v:  # not NaN: memoised
                    return float(v)
        scalar = _is_scalar(num_nodes, num_gpus)
        nodes, gpus = np.broadcast_arrays(np.asarray(num_nodes, dtype=np.int64),
                                          np.asarray(num_gpus, dtype=np.int64))
        if nodes.size and (nodes.min() < 0 or gpus.min() < 0):
            raise ValueError("numbers of nodes and GPUs must be >= 0")
        if nodes.size and (nodes.max() >= table.shape[0] or gpus.max() >= table.shape[1]):
            table = self._grow(int(nodes.max()), int(gpus.max()))
        vals = table[nodes, gpus]
        missing = np.isnan(vals)
        if np.any(missing):
            pairs = np.unique(np.stack([nodes[missing], gpus[missing]], axis=1), axis=0)
            good = self.goodput_fn.optimize(pairs[:, 0], pairs[:, 1])[0]
            table[pairs[:, 0], pairs[:, 1]] = good / self.base_goodput
            vals = table[nodes, gpus]
        return float(vals) if scalar else vals

    def _grow(self, max_nodes: int, max_gpus: int) -> np.ndarray:
        old = self._table
        rows = max(old.shape[0], 1 << max_nodes.bit_length())
        cols = max(old.shape[1], 1 << max_gpus.bit_length())
        new = np.full((rows, cols), np.nan)
        new[:, 0] = 0.0
        new[:old.shape[0], :old.shape[1]] = old
        self._table = new
        return new
