"""PolluxSched's population-based search over allocation matrices (Pollux (OSDI'21) §4.2-4.3).

Maximises FITNESS_p (Eq. 14) with the artifact's genetic operators: tournament selection,
single-point crossover over jobs, mutation (reset, zero or grow a job's entries), repair
(interference avoidance, caps, 16 nodes per job, capacity by priority), deduplication, survival
of the fittest (the artifact's NSGA-II with one objective). Encoding: node n holds `C` slots,
each GPU's job index sorted (= priority), then FREE (J), then BLOCK (J + 1), stored slot-major
(C, P, nodes) for `slot_columns`: cost follows the cluster. Decided here: a free node takes
growth requests from the first two jobs drawn and its own jobs; `patience` stops early.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from corral.policies.slot_columns import (
    count_true,
    extend_runs,
    merge_smallest,
    pick,
    position_in_run,
    run_starts,
    sort_columns,
)

__all__ = [
    "SPEEDUP_EPS", "SearchSettings", "SpeedupTable", "AllocationProblem", "SearchResult",
    "power_mean", "fitness", "genetic_search", "remap_population",
]

#: Jobs drawn in priority order as growth requesters per node with free GPUs (besides the
#: jobs already on it): the first few are all that node capacity can ever go to.
GROWTH_REQUESTERS = 2
#: Added to every speedup in the power mean so that p < 0 stays finite (the artifact's 1e-3).
SPEEDUP_EPS = 1e-3


@dataclass(frozen=True)
class SearchSettings:
    """GA knobs; defaults are the Pollux artifact's (pymoo NSGA-II, Pollux (OSDI'21) §4.3)."""

    population: int = 100
    generations: int = 100
    patience: int = 0  # stop after this many generations without a better best (0 = never)
    crossover_prob: float = 0.9
    reset_prob: float = 0.1  # per job row: back to the current allocation
    zero_row_prob: float = 0.1  # per job row: selected for zeroing ...
    zero_elem_prob: float = 0.1  # ... then per node entry: zeroed
    max_nodes_per_job: int = 16
    avoid_interference: bool = True

    def __post_init__(self) -> None:
        if self.population < 2 or self.generations < 0 or self.patience < 0:
            raise ValueError("need population >= 2, generations >= 0 and patience >= 0")
        if self.max_nodes_per_job < 1:
            raise ValueError("max_nodes_per_job must be >= 1")


class SpeedupTable:
    """Every job's speedup for every (nodes, GPUs) it may get, packed for vectorised lookup.

    `rows[j]` is a (max_nodes_j + 1) x (max_gpus_j + 1) array: entry [N, K] is job j's speedup
    on K GPUs over N nodes (entries with N > K are never read).
    """

    def __init__(self, rows: list[np.ndarray]) -> None:
        sizes = np.array([r.size for r in rows], dtype=np.int64)
        self.width = np.array([r.shape[1] for r in rows], dtype=np.int64)
        self.offset = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.flat = (np.concatenate([r.ravel() for r in rows]).astype(float)
                     if rows else np.zeros(0))

    def __len__(self) -> int:
        return len(self.width)

    def grid(self, j: int) -> np.ndarray:
        """Job j's table as a (nodes + 1, GPUs + 1) view: entry [N, K] as in `rows`."""
        start = int(self.offset[j])
        end = int(self.offset[j + 1]) if j + 1 < len(self.offset) else len(self.flat)
        return self.flat[start:end].reshape(-1, int(self.width[j]))

    def lookup(self, nodes: np.ndarray, gpus: np.ndarray) -> np.ndarray:
        """Speedups of (nodes, gpus) arrays whose last axis is the job index."""
        return self.flat[self.offset + nodes * self.width + gpus]


@dataclass
class AllocationProblem:
    """One round's search problem. Jobs are in priority order: index 0 wins capacity conflicts."""

    node_gpus: np.ndarray  # (nodes,) GPUs on each node
    base: np.ndarray  # (J, nodes) current allocation
    max_gpus: np.ndarray  # (J,) most GPUs each job may get
    min_gpus: np.ndarray  # (J,) fewest GPUs a running job needs (fewer -> 0)
    speedup: SpeedupTable  # speedups (already scaled) of each job
    penalty: np.ndarray  # (J,) speedup multiplier when a job's allocation changes
    p: float  # power-mean exponent (fairness knob)

    @property
    def num_jobs(self) -> int:
        return int(self.base.shape[0])


@dataclass
class SearchResult:
    best: np.ndarray  # (C, nodes) slots of the best allocation found (jobs < num_jobs)
    num_jobs: int
    fitness: float
    population: np.ndarray  # final population in slot encoding (for warm starts)
    generations: int  # generations actually run

    @property
    def allocation(self) -> np.ndarray:
        """(J, nodes) GPUs of each job on each node."""
        job, node, gpus = self.entries()
        out = np.zeros((self.num_jobs, self.best.shape[1]), dtype=np.int64)
        out[job, node] = gpus
        return out

    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(job, node, GPUs) of every nonzero allocation entry, by job then node."""
        nodes = self.best.shape[1]
        used = self.best < self.num_jobs
        key = self.best[used].astype(np.int64) * nodes + np.nonzero(used)[1]
        cells, gpus = np.unique(key, return_counts=True)
        return cells // nodes, cells % nodes, gpus


def power_mean(values: np.ndarray, p: float, axis: int = -1) -> np.ndarray:
    """((1/J) sum (v + eps)^p)^(1/p) over `axis`; p = 0 is the geometric mean of max(v, eps)."""
    return _mean_of_terms(_power_terms(np.asarray(values, dtype=float), p), p, axis)


def _power_terms(v: np.ndarray, p: float) -> np.ndarray:
    """The power mean's per-value terms: (v + eps)^p, or log(max(v, eps)) for p = 0."""
    if p == 0:
        return np.log(np.maximum(v, SPEEDUP_EPS))
    shifted = v + SPEEDUP_EPS
    return np.reciprocal(shifted) if p == -1 else shifted ** p


def _mean_of_terms(terms: np.ndarray, p: float, axis: int = -1) -> np.ndarray:
    """The power mean from its terms (`_power_terms`) along `axis`."""
    if p == 0:
        return np.exp(np.mean(terms, axis=axis))
    return np.mean(terms, axis=axis) ** (1.0 / p)


def fitness(speedups: np.ndarray, changed: np.ndarray, penalty: np.ndarray, p: float) -> np.ndarray:
    """FITNESS_p (Eq. 14) with each changed job's speedup multiplied by its penalty factor."""
    return power_mean(speedups * (1.0 + changed * (np.asarray(penalty) - 1.0)), p)


def remap_population(slots: np.ndarray, old_to_new: np.ndarray, num_jobs: int) -> np.ndarray:
    """Re-index a slot-encoded population after the job set or order changed.

    `old_to_new[j]` is old job j's index among the `num_jobs` current jobs, or -1 if it left;
    returns the slots in the new indices (left jobs' GPUs freed), nodes re-sorted.
    """
    old_j = len(old_to_new)
    table: np.ndarray = np.empty(old_j + 2, dtype=slot_dtype(num_jobs))
    table[:old_j] = np.where(old_to_new >= 0, old_to_new, num_jobs)
    table[old_j] = num_jobs  # FREE
    table[old_j + 1] = num_jobs + 1  # BLOCK
    columns = table[np.moveaxis(slots, -1, 0)]  # slot-major: the search's own layout
    return np.moveaxis(sort_columns(columns), 0, -1)


def slot_dtype(num_jobs: int) -> type:
    """Smallest integer type holding job indices, FREE and BLOCK."""
    return np.int16 if num_jobs + 2 <= np.iinfo(np.int16).max else np.int32


class _Searcher:
    """Operators on populations stored slot-major: shape (C, P, nodes), `S[c, i, n]` the job
    in slot c of node n in individual i (see the module docstring)."""

    def __init__(self, problem: AllocationProblem, settings: SearchSettings,
                 rng: np.random.Generator) -> None:
        self.pb = problem
        self.st = settings
        self.rng = rng
        J = problem.num_jobs
        caps = np.asarray(problem.node_gpus, dtype=np.int64)
        self.J, self.free, self.block = J, J, J + 1
        self.dtype = slot_dtype(J)
        self.caps = caps
        self.num_nodes = len(caps)
        self.C = int(caps.max()) if len(caps) else 0
        self.pos = np.arange(self.C, dtype=np.int64)[:, None, None]  # slot index, (C, 1, 1)
        self.blocked = self.pos[:, 0] >= caps[None, :]  # (C, nodes)
        self.any_blocked = bool(self.blocked.any())
        big = np.iinfo(np.int64).max // 4
        self.max_gpus = np.concatenate([np.asarray(problem.max_gpus, dtype=np.int64), [big, big]])
        # per job index: most slots it may keep on one node (C: no limit), for slot lookups
        self.slot_cap = np.minimum(self.max_gpus, self.C).astype(np.int16)
        self.min_gpus = np.concatenate([np.asarray(problem.min_gpus, dtype=np.int64), [0, 0]])
        self.need_min = bool(np.any(self.min_gpus > 1))
        self.is_job = np.arange(J + 2) < J  # columns of (P, J + 2) tables that are jobs
        self.max_nodes = settings.max_nodes_per_job
        # Random per-node weights: a job's allocation vector hashes to sum(count * weight).
        self.node_weight = rng.integers(1, 1 << 30, size=self.num_nodes).astype(float)
        # Random per-slot weights (node-major, as drawn): an individual hashes to their dot product.
        slot_hash = rng.integers(1, 1 << 62, size=self.num_nodes * max(self.C, 1), dtype=np.int64)
        self.slot_hash = np.ascontiguousarray(
            slot_hash.reshape(self.num_nodes, max(self.C, 1))[:, : self.C].T)  # (C, nodes)
        self._weights = np.zeros(0)
        self._row_base = np.zeros(0, dtype=np.intp)  # individual i's first (P, J + 2) index
        self.penalty = np.asarray(problem.penalty, dtype=float)
        self.terms = self._fitness_terms()
        self.base_slots = self.encode(np.asarray(problem.base, dtype=np.int64))  # (C, nodes)
        k, _, h = self._per_job(self.base_slots[:, None])
        assert h is not None  # (with_hash)
        self.base_k, self.base_h = k[0, :J], h[0, :J]

    def _fitness_terms(self) -> np.ndarray:
        """Every speedup table entry's power-mean term, unchanged then changed (times the
        job's penalty factor): `fitness` computes each job's term from these same values
        with these same operations, so evaluating by lookup gives the same bits."""
        table = self.pb.speedup
        owner = np.repeat(np.arange(len(table)), np.diff(np.append(table.offset, len(table.flat))))
        factor = 1.0 + (self.penalty - 1.0)  # what `fitness` multiplies a changed job by
        values = np.concatenate([table.flat, table.flat * factor[owner]])
        return _power_terms(values, self.pb.p)

    # -- encoding -----------------------------------------------------------------------------
    def encode(self, alloc: np.ndarray) -> np.ndarray:
        """(J, nodes) allocation -> (C, nodes) slots (GPUs beyond a node's size are dropped,
        jobs later in the order first)."""
        jj, nn = np.divmod(np.flatnonzero(alloc), self.num_nodes)
        order = np.argsort(nn * (self.J + 1) + jj)  # node-major, jobs ascending (unique keys)
        jj, nn = jj[order], nn[order]
        count = alloc[jj, nn]
        job, node = np.repeat(jj, count), np.repeat(nn, count)
        node_start = np.concatenate([[0], np.cumsum(np.bincount(node, minlength=self.num_nodes))])
        slot = np.arange(len(node)) - node_start[node]
        fits = slot < self.caps[node]
        out: np.ndarray = np.full((self.C, self.num_nodes), self.free, dtype=self.dtype)
        out[slot[fits], node[fits]] = job[fits]
        out[self.blocked] = self.block
        return out

    def decode(self, slots: np.ndarray) -> np.ndarray:
        """(C, nodes) slots -> (J, nodes) allocation."""
        return SearchResult(slots, self.J, 0.0, slots[:, None], 0).allocation

    @staticmethod
    def to_columns(slots: np.ndarray, dtype: npt.DTypeLike) -> np.ndarray:
        """(P, nodes, C) slots (the public layout) -> (C, P, nodes)."""
        return np.ascontiguousarray(np.moveaxis(slots, -1, 0), dtype=dtype)

    @staticmethod
    def from_columns(S: np.ndarray) -> np.ndarray:
        """(C, P, nodes) -> (P, nodes, C) slots (the public layout; a view)."""
        return np.moveaxis(S, 0, -1)

    # -- per-job quantities -------------------------------------------------------------------
    def _flat(self, S: np.ndarray) -> np.ndarray:
        """Slots as indices into flattened (P, J + 2) per-(individual, job) tables."""
        P = S.shape[1]
        if len(self._row_base) < P:
            self._row_base = np.arange(2 * P, dtype=np.intp) * (self.J + 2)
        return np.add(S, self._row_base[:P, None], dtype=np.intp)

    def _gather(self, table: np.ndarray, S: np.ndarray, flat: np.ndarray | None = None
                ) -> np.ndarray:
        """`table[i, S[c, i, n]]` for every slot of S: a (P, J + 2) per-(individual, job)
        table read at each slot's job, (C, P, nodes); `flat` is `_flat(S)` if known."""
        return np.take(table.reshape(-1), self._flat(S) if flat is None else flat)

    def _node_weights(self, size: int) -> np.ndarray:
        """`node_weight` of each slot of a raveled (C, P, nodes) array (node innermost)."""
        if len(self._weights) < size:
            self._weights = np.tile(self.node_weight, max(size // max(self.num_nodes, 1), 1))
        return self._weights[:size]

    def _per_job(self, S: np.ndarray, with_hash: bool = True, starts: np.ndarray | None = None,
                 flat: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """GPUs (K), nodes (N) and allocation hash of every (individual, job); (P, J + 2);
        `flat` is `_flat(S)` if known."""
        size = S.shape[1] * (self.J + 2)
        if flat is None:
            flat = self._flat(S)
        # one count of (individual, job, first slot of a run?) pairs gives K and N
        pair = flat * 2
        pair += run_starts(S) if starts is None else starts
        both = np.bincount(pair.reshape(-1), minlength=2 * size).reshape(-1, self.J + 2, 2)
        N = both[..., 1]
        K = both[..., 0] + N
        if not with_hash:
            return K, N, None
        H = np.bincount(flat.reshape(-1), weights=self._node_weights(flat.size),
                        minlength=size).reshape(-1, self.J + 2)
        return K, N, H

    def hash_individuals(self, S: np.ndarray) -> np.ndarray:
        """sum over slots of job * slot weight (int64, wrapping) of each individual."""
        acc = np.zeros(S.shape[1:], dtype=np.int64)
        for c in range(self.C):
            acc += S[c] * self.slot_hash[c]
        return acc.sum(axis=1)

    # -- fitness ------------------------------------------------------------------------------
    def evaluate(self, S: np.ndarray) -> np.ndarray:
        """FITNESS_p of each individual (by `_fitness_terms`)."""
        J = self.J
        if J == 0:
            return np.zeros(S.shape[1])
        K, N, H = self._per_job(S)
        assert H is not None  # (with_hash)
        K, N, H = K[:, :J], N[:, :J], H[:, :J]
        changed = (H != self.base_h) | (K != self.base_k)
        table = self.pb.speedup
        entry = table.offset + N * table.width + K
        entry += changed * len(table.flat)
        return _mean_of_terms(np.take(self.terms, entry), self.pb.p)

    # -- operators ----------------------------------------------------------------------------
    def _blocked(self, S: np.ndarray) -> np.ndarray:
        """Positions beyond each node's size set to BLOCK."""
        if self.any_blocked:
            S = pick(self.blocked[:, None, :], self.block, S)
        return S

    def crossover(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """Single-point crossover over jobs: each mating of A[:, i] and B[:, i] gives two
        children (rows < cut from one parent, the rest from the other), or copies of the
        parents."""
        M = A.shape[1]
        cut = np.tile(self.rng.integers(0, max(self.J, 1), size=M), 2)
        do = np.tile(self.rng.random(M) < self.st.crossover_prob, 2)
        cut = np.where(do, cut, self.J).astype(self.dtype)[:, None]  # cut J: a copy
        return self._splice(np.concatenate([A, B], axis=1), np.concatenate([B, A], axis=1), cut)

    def _splice(self, A: np.ndarray, B: np.ndarray, cut: np.ndarray) -> np.ndarray:
        """Per node: A's jobs < cut (a prefix, slots being sorted), then B's jobs >= cut (the
        C - a_n first of them)."""
        a_n = count_true(A < cut)
        b_lo = count_true(B < cut)
        b_end = count_true(B < self.J)
        shift = b_lo - a_n  # B's slot c + shift goes to slot c
        out = np.empty_like(A)
        for c in range(self.C):
            from_b = np.full(shift.shape, self.free, dtype=self.dtype)
            for e in range(self.C):
                from_b = pick(shift == e - c, B[e], from_b)
            from_b = pick(c + shift < b_end, from_b, self.free)
            out[c] = pick(c < a_n, A[c], from_b)
        return self._blocked(out)

    def mutate(self, S: np.ndarray) -> np.ndarray:
        """Reset rows to the current allocation, zero some entries, grow on free GPUs.

        All removals and additions are merged into the nodes at the end; node capacity then
        goes to the jobs first in priority order.
        """
        rng, st, J = self.rng, self.st, self.J
        P = S.shape[1]
        # (1) rows reset to the current allocation, (2) rows whose entries may be zeroed
        reset = (rng.random((P, J + 2)) < st.reset_prob) & self.is_job
        rows = (rng.random((P, J + 2)) < st.zero_row_prob) & self.is_job
        flat = self._flat(S)
        drop = self._gather(reset, S, flat)
        zero = self._gather(rows, S, flat)
        if zero.any():  # each (job, node) entry of a selected row: one draw for all its GPUs
            draws = np.moveaxis(rng.random((P, self.num_nodes, self.C)) < st.zero_elem_prob, -1, 0)
            draws = np.ascontiguousarray(draws)
            runs = run_starts(S)
            for c in range(1, self.C):  # a run's later slots take its first slot's draw
                draws[c] = (runs[c] & draws[c]) | (~runs[c] & draws[c - 1])
            drop |= zero & draws
        back = self._gather(reset, np.broadcast_to(self.base_slots[:, None, :], S.shape))
        merged = merge_smallest(sort_columns(pick(drop, self.free, S)),
                                sort_columns(pick(back, self.base_slots[:, None, :], self.free)))
        return self._blocked(self._growth(merged))

    def _growth(self, M: np.ndarray) -> np.ndarray:
        """(3) growth requests on nodes with free GPUs (see the module docstring), added to
        the sorted, merged slots `M` (C, P, nodes); node capacity goes to jobs in priority
        order (the C first slots)."""
        rng, J = self.rng, self.J
        caps = self.caps
        used = count_true(M < J)  # (P, nodes)
        has_free = used < caps
        if J == 0 or not has_free.any():
            return M
        # the first jobs (in priority order) picking this node, each w.p. 1/|free nodes|:
        # geometric gaps between successive requesters
        q = 1.0 / np.maximum(has_free.sum(axis=1, keepdims=True), 1)  # per individual
        drawn: list[np.ndarray] = []
        job = np.full(has_free.shape, -1, dtype=np.int64)
        for _ in range(GROWTH_REQUESTERS):
            job = job + geometric_draws(rng, q, has_free.shape)
            ok = has_free & (job < J)
            drawn.append(pick(ok, job, self.free).astype(self.dtype))
        blocks = []
        for job in drawn:
            cur = np.minimum(count_true(M == job), caps).astype(np.int64)
            add = (job < J) * (_uniform_to(rng, cur, caps) - cur)
            blocks.append(pick(self.pos < add, job, self.free))
        M = self._growth_in_place(M, has_free, drawn)
        for block in blocks:
            M = merge_smallest(M, block)
        return M

    def _growth_in_place(self, M: np.ndarray, has_free: np.ndarray, drawn: list[np.ndarray],
                         dense: bool | None = None) -> np.ndarray:
        """Each job on a node with free GPUs asks to grow there w.p. 1 / the number of its nodes
        with free GPUs (the artifact's second growth probability; nearly always for a job on
        one such node), unless `drawn` there already; a request lengthens the job's run on the
        node to a uniform count between its current one and the node size (`extend_runs`).
        When under half the (individual, node) cells have free GPUs, only those are gathered,
        grown and scattered back, so the cost follows them (`dense` None; True or False forces
        one way); either way the same draws in the same order, so the same result."""
        J = self.J
        n = M.shape[2]
        flat = M.reshape(len(M), -1)
        free = has_free.reshape(-1)
        if dense is None:
            dense = 2 * int(np.count_nonzero(free)) > len(free)
        if dense:
            X = flat
            first = run_starts(X) & (X < J) & free  # one slot per (job, node with free GPUs)
        else:
            cells = np.flatnonzero(free)
            X = flat[:, cells]
            first = run_starts(X) & (X < J)
        at = np.flatnonzero(first)  # by slot, then (individual, node)
        if not len(at):
            return M
        cell = at % X.shape[1]
        if not dense:
            cell = cells[cell]
        job = X.reshape(-1)[at]
        owner = (cell // n) * J + job  # (individual, job)
        nodes = np.bincount(owner)[owner]
        want = self.rng.random(len(at)) * nodes < 1.0
        for other in drawn:
            want &= job != other.reshape(-1)[cell]
        at, cell = at[want], cell[want]
        if not len(at):
            return M
        cur = _run_lengths(X).reshape(-1)[at]
        add = np.zeros(X.shape, dtype=np.int16)
        add.reshape(-1)[at] = _uniform_to(self.rng, cur, self.caps[cell % n]) - cur
        grown = extend_runs(X, add)
        if dense:
            return grown.reshape(M.shape)
        flat[:, cells] = grown
        return flat.reshape(M.shape)  # M itself when M is contiguous

    def repair(self, S: np.ndarray) -> np.ndarray:
        """Interference avoidance, per-job GPU and node caps, minimum GPUs (capacity is kept
        by construction). Removed GPUs leave FREE holes (whole or trailing parts of a job's
        run on a node, so runs stay contiguous) until one final sort."""
        J = self.J
        if J == 0:
            return S
        holes = False
        runs = run_starts(S)
        flat = self._flat(S)
        K, N, _ = self._per_job(S, with_hash=False, starts=runs, flat=flat)
        spread = self._gather((N > 1) & self.is_job, S, flat)  # slots of jobs on > 1 node
        kept = None
        if self.st.avoid_interference and spread.any():
            first = pick(spread[0], S[0], J)
            for c in range(1, self.C):
                np.minimum(first, pick(spread[c], S[c], J), out=first)
            drop = spread & (S != first)
            if drop.any():
                S = pick(drop, self.free, S)
                kept = ~drop
                holes = True
        # K, N from before the drops over-approximate: _trim recounts each flagged job's
        # remaining GPUs, so a job no longer over its caps loses nothing.
        over = ((K > self.max_gpus) | (N > self.max_nodes)) & self.is_job
        if over.any():
            in_over = self._gather(over, S)
            if kept is not None:
                in_over &= kept
            S, trimmed = self._trim(S, in_over, spread, runs)
            holes |= trimmed
        if self.need_min:
            K = self._per_job(S, with_hash=False)[0]
            short = (K > 0) & (K < self.min_gpus) & self.is_job
            if short.any():
                S = pick(self._gather(short, S), self.free, S)
                holes = True
        return sort_columns(S) if holes else S

    def _trim(self, S: np.ndarray, mask: np.ndarray, spread: np.ndarray,
              runs: np.ndarray) -> tuple[np.ndarray, bool]:
        """Keep each over-cap job's first GPUs (and nodes) in a random node order; `mask`
        marks its slots, `spread` the slots of jobs that were on several nodes, `runs` the
        first slot of each (job, node) run (a job's GPUs on one node are one run). A job on
        one node keeps its first slots there; the others' runs are ordered by key."""
        J, C = self.J, self.C
        _, P, n = S.shape
        key = self.rng.random((P, n)).reshape(-1)
        offset = position_in_run(runs)
        drop = mask & ~spread & (offset >= np.take(self.slot_cap, S))
        at = np.flatnonzero(mask & spread & runs)  # first slots of spread jobs' runs, (c, i, n)
        if len(at):
            cell = at % (P * n)  # (i, n)
            job = S.reshape(-1)[at].astype(np.int64)
            group = (cell // n) * (J + 2) + job
            # node order of each job: its key, ties by node (group * 2 keeps jobs apart)
            v = group * 2.0 + key[cell]
            order = np.argsort(v)
            if len(v) > 1 and np.any(np.diff(v[order]) == 0):
                order = np.lexsort((cell, v))
            at, group, job = at[order], group[order], job[order]
            length = _run_lengths(S).reshape(-1)[at]
            idx = np.arange(len(at))
            new_group = np.ones(len(at), dtype=bool)
            new_group[1:] = group[1:] != group[:-1]
            start = np.maximum.accumulate(np.where(new_group, idx, 0))
            total = np.cumsum(length)
            before = total - length - (total[start] - length[start])  # its GPUs on earlier nodes
            keep = np.where(idx - start < self.max_nodes,
                            np.maximum(self.max_gpus[job] - before, 0), 0)
            limit = np.full(S.shape, C, dtype=np.int16)
            limit.reshape(-1)[at] = np.minimum(keep, C)
            for c in range(1, C):  # a run's later slots take its first slot's limit
                limit[c] = pick(runs[c], limit[c], limit[c - 1])
            drop |= mask & spread & (offset >= limit)
        if not drop.any():
            return S, False
        return pick(drop, self.free, S), True

    def select(self, fit: np.ndarray, count: int) -> np.ndarray:
        """Binary tournament: `count` parent indices."""
        pairs = self.rng.integers(0, len(fit), size=(count, 2))
        return np.where(fit[pairs[:, 0]] >= fit[pairs[:, 1]], pairs[:, 0], pairs[:, 1])


def geometric_draws(rng: np.random.Generator, p: np.ndarray, shape: tuple[int, ...]
                    ) -> np.ndarray:
    """`rng.geometric(np.broadcast_to(p, shape))`: the same numbers from the same draws,
    cheaper when p < 1/3 everywhere. numpy then inverts one standard exponential per entry,
    ceil(-E / log1p(-p)); here log1p is taken once per entry of `p` (one per individual for
    the growth requests) instead of once per draw. Checked against numpy once per process
    (`_geometric_matches_numpy`); where it differs, numpy's own draws are used."""
    if (p.size == 0 or not np.all(p < _GEOMETRIC_INVERSION_BELOW)
            or not _geometric_matches_numpy()):
        return rng.geometric(np.broadcast_to(p, shape))
    return _inverted(rng, p, shape)


#: numpy's geometric uses inversion below this p, a search above (its distributions.c).
_GEOMETRIC_INVERSION_BELOW = 0.333333333333333333333333


@functools.cache
def _geometric_matches_numpy() -> bool:
    """`_inverted` gives numpy's numbers and leaves the generator where numpy does."""
    ours, theirs = np.random.default_rng(11), np.random.default_rng(11)
    p = 1.0 / np.arange(4, 400, 3, dtype=float)[:, None]
    for _ in range(3):
        if not np.array_equal(_inverted(ours, p, (len(p), 64)),
                              theirs.geometric(np.broadcast_to(p, (len(p), 64)))):
            return False
    return ours.random() == theirs.random()


def _inverted(rng: np.random.Generator, p: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """numpy's inversion for geometric draws (libm's log1p, as numpy's C code calls)."""
    log1p = np.array([math.log1p(-v) for v in p.ravel().tolist()]).reshape(p.shape)
    z = np.ceil(-rng.standard_exponential(shape) / log1p)
    small = z < 9.223372036854776e+18  # the smallest double above INT64_MAX
    if small.all():
        return z.astype(np.int64)
    return np.where(small, z, 0.0).astype(np.int64) + (~small) * np.iinfo(np.int64).max


def _uniform_to(rng: np.random.Generator, low: np.ndarray, high: np.ndarray | int) -> np.ndarray:
    """A uniform integer in [low, high] for each entry (int64; one float draw each, cheaper
    than `Generator.integers` with array bounds)."""
    return low + (rng.random(np.shape(low)) * (high + 1 - low)).astype(np.int64)


def _run_lengths(S: np.ndarray) -> np.ndarray:
    """Length of the run of equal values (along axis 0) that starts at each slot."""
    out = np.ones(S.shape, dtype=np.int16)
    for c in range(len(S) - 2, -1, -1):
        out[c] += (S[c] == S[c + 1]) * out[c + 1]
    return out


def genetic_search(problem: AllocationProblem, settings: SearchSettings | None = None,
                   rng: np.random.Generator | None = None,
                   seeds: np.ndarray | None = None) -> SearchResult:
    """Maximise FITNESS_p over allocations; `seeds` (slot encoding, e.g. last round's final
    population remapped) join the current allocation in the initial population."""
    st = settings or SearchSettings()
    rng = rng or np.random.default_rng()
    s = _Searcher(problem, st, rng)
    pop = s.base_slots[:, None, :]
    if seeds is not None and len(seeds) and seeds.shape[1:] == (s.num_nodes, s.C):
        pop = np.concatenate([pop, s.to_columns(seeds[: st.population], s.dtype)], axis=1)
    pop = s.repair(pop)
    h_pop = s.hash_individuals(pop)
    _, keep = np.unique(h_pop, return_index=True)
    keep = np.sort(keep)
    pop, h_pop = pop[:, keep], h_pop[keep]
    fit = s.evaluate(pop)
    best = float(fit.max())
    stall = 0
    gens = 0
    n_mate = max(1, st.population // 2)
    while gens < st.generations and s.J > 0:
        gens += 1
        parents = s.select(fit, 2 * n_mate)
        off = s.repair(s.mutate(s.crossover(pop[:, parents[:n_mate]], pop[:, parents[n_mate:]])))
        h_off = s.hash_individuals(off)
        _, first = np.unique(h_off, return_index=True)
        first = np.sort(first)
        first = first[~np.isin(h_off[first], h_pop)]
        if len(first):
            off = off[:, first]
            pop = np.concatenate([pop, off], axis=1)
            h_pop = np.concatenate([h_pop, h_off[first]])
            fit = np.concatenate([fit, s.evaluate(off)])
            order = np.argsort(-fit, kind="stable")[: st.population]
            pop, fit, h_pop = pop[:, order], fit[order], h_pop[order]
        if fit[0] > best + 1e-12 * abs(best):
            best = float(fit[0])
            stall = 0
        else:
            stall += 1
            if st.patience and stall >= st.patience:
                break
    top = int(np.argmax(fit))
    return SearchResult(best=pop[:, top], num_jobs=s.J, fitness=float(fit[top]),
                        population=s.from_columns(pop), generations=gens)
