"""PolluxSched's population-based search over allocation matrices (Pollux OSDI'21 §4.2-4.3).

The search maximises FITNESS_p (Eq. 14): the power mean over all J active jobs of each job's
speedup (Eq. 15), a job whose allocation differs from its current one having its speedup
multiplied by its re-allocation factor. It is a genetic algorithm with the artifact's
operators (spec ../shared/specs/pollux.md §2.9): binary-tournament selection, single-point
crossover over the job dimension, mutation (reset a job's row to its current allocation; zero
some of its per-node entries; grow entries on nodes with free GPUs), repair (interference
avoidance, per-job GPU cap, at most 16 nodes per job, node capacity with jobs earlier in the
priority order winning conflicts, minimum GPUs), duplicate elimination, and survival of the
best `population` of parents and offspring. The artifact runs pymoo's NSGA-II (population
100, 100 generations) with a second objective, cluster utility, used only by its disabled
cluster autoscaler; it applies the solution with the best FITNESS, so with one objective its
rank-and-crowding survival is exactly "keep the fittest", which is what this does.

Encoding [D]. An individual is the allocation matrix A (J x nodes) stored node-major as GPU
slots: for node n a row of `C` = max GPUs per node entries, holding the job index of each
allocated GPU sorted by job index, then FREE (= J) for idle GPUs, then BLOCK (= J + 1) for
positions beyond the node's size. This is a one-to-one encoding of every allocation matrix that
respects node capacity, of size nodes x C instead of J x nodes, so one generation costs time in
proportion to the cluster, not to jobs x nodes (1,000 jobs on 256 nodes stay cheap). Because
each node's slots are sorted by job index (= priority), merging new GPUs into a node and
keeping its first `C` slots *is* the artifact's node-capacity repair.

Decided where the artifact is not directly transferable to this encoding [D]:
* Growth mutation: the artifact lets every job pick every free node with probability
  1/|free nodes| (plus its own nodes), then resolves the many conflicting requests by job order.
  Here each node with free GPUs receives at most three requests per offspring: the first two
  jobs in priority order to pick it under that same per-job probability (drawn as geometric
  gaps), and one random job already on the node. Each request sets the job's GPUs there to a
  uniform count between its current one and the node size, as in the artifact.
* Per-job caps pick the GPUs to keep in a random node order, as the artifact's shuffle.
* The search stops early once the best fitness has not improved for `patience` generations
  (0 = always run all generations).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "SPEEDUP_EPS", "SearchSettings", "SpeedupTable", "AllocationProblem", "SearchResult",
    "power_mean", "fitness", "genetic_search", "remap_population",
]

#: Jobs drawn in priority order as growth requesters per node with free GPUs (plus one job
#: already on it): the first few are all that node capacity can ever go to.
GROWTH_REQUESTERS = 2
#: Added to every speedup in the power mean so that p < 0 stays finite (the artifact's 1e-3).
SPEEDUP_EPS = 1e-3


@dataclass(frozen=True)
class SearchSettings:
    """GA knobs; defaults are the artifact's (pymoo NSGA-II, spec §2.9)."""

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
    allocation: np.ndarray  # (J, nodes) best allocation found
    fitness: float
    population: np.ndarray  # final population in slot encoding (for warm starts)
    generations: int  # generations actually run


def power_mean(values: np.ndarray, p: float, axis: int = -1) -> np.ndarray:
    """((1/J) sum (v + eps)^p)^(1/p) over `axis`; p = 0 is the geometric mean of max(v, eps)."""
    v = np.asarray(values, dtype=float)
    if p == 0:
        return np.exp(np.mean(np.log(np.maximum(v, SPEEDUP_EPS)), axis=axis))
    shifted = v + SPEEDUP_EPS
    powered = np.reciprocal(shifted) if p == -1 else shifted ** p
    return np.mean(powered, axis=axis) ** (1.0 / p)


def fitness(speedups: np.ndarray, changed: np.ndarray, penalty: np.ndarray, p: float) -> np.ndarray:
    """FITNESS_p (Eq. 14) with each changed job's speedup multiplied by its penalty factor."""
    return power_mean(speedups * (1.0 + changed * (np.asarray(penalty) - 1.0)), p)


def remap_population(slots: np.ndarray, old_to_new: np.ndarray, num_jobs: int) -> np.ndarray:
    """Re-index a slot-encoded population after the job set or order changed.

    `old_to_new[j]` is old job j's index among the `num_jobs` current jobs, or -1 if it left;
    returns the slots in the new indices (left jobs' GPUs freed), nodes re-sorted.
    """
    old_j = len(old_to_new)
    table = np.empty(old_j + 2, dtype=np.int64)
    table[:old_j] = np.where(old_to_new >= 0, old_to_new, num_jobs)
    table[old_j] = num_jobs  # FREE
    table[old_j + 1] = num_jobs + 1  # BLOCK
    return np.sort(table[slots], axis=-1)


def _count_last(mask: np.ndarray) -> np.ndarray:
    """Number of True along the (short) last axis; slice adds beat a reduction there ~8x."""
    out = mask[..., 0].astype(np.int64)
    for i in range(1, mask.shape[-1]):
        out += mask[..., i]
    return out


def _min_last(x: np.ndarray) -> np.ndarray:
    out = x[..., 0].copy()
    for i in range(1, x.shape[-1]):
        np.minimum(out, x[..., i], out=out)
    return out


def _pick(mask: np.ndarray, a, b) -> np.ndarray:
    """np.where(mask, a, b) for integers, by arithmetic (np.where is ~5-10x slower on the
    unpredictable masks of a GA, on large arrays)."""
    return b + mask * (a - b)


def _gather_last(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """take_along_axis(x, idx, -1) through one flat take (several times faster)."""
    width = x.shape[-1]
    rows = np.arange(x.size // width, dtype=np.int64).reshape(x.shape[:-1] + (1,)) * width
    return np.take(x.reshape(-1), idx + rows)


class _Searcher:
    """Operators on slot-encoded populations of shape (P, nodes, C)."""

    def __init__(self, problem: AllocationProblem, settings: SearchSettings,
                 rng: np.random.Generator) -> None:
        self.pb = problem
        self.st = settings
        self.rng = rng
        J = problem.num_jobs
        caps = np.asarray(problem.node_gpus, dtype=np.int64)
        self.J, self.free, self.block = J, J, J + 1
        self.caps = caps
        self.num_nodes = len(caps)
        self.C = int(caps.max()) if len(caps) else 0
        self.pos = np.arange(self.C, dtype=np.int64)
        self.blocked = self.pos[None, :] >= caps[:, None]  # (nodes, C)
        big = np.iinfo(np.int64).max // 4
        self.max_gpus = np.concatenate([np.asarray(problem.max_gpus, dtype=np.int64), [big, big]])
        self.min_gpus = np.concatenate([np.asarray(problem.min_gpus, dtype=np.int64), [0, 0]])
        self.need_min = bool(np.any(self.min_gpus > 1))
        self.is_job = np.arange(J + 2) < J  # columns of (P, J + 2) tables that are jobs
        self.max_nodes = settings.max_nodes_per_job
        # Random per-node weights: a job's allocation vector hashes to sum(count * weight).
        self.node_weight = rng.integers(1, 1 << 30, size=self.num_nodes).astype(float)
        self.slot_hash = rng.integers(1, 1 << 62, size=self.num_nodes * max(self.C, 1),
                                      dtype=np.int64)
        self.penalty = np.asarray(problem.penalty, dtype=float)
        self.base_slots = self.encode(np.asarray(problem.base, dtype=np.int64))
        k, _, h = self._per_job(self.base_slots[None])
        self.base_k, self.base_h = k[0, :J], h[0, :J]

    # -- encoding -----------------------------------------------------------------------------
    def encode(self, alloc: np.ndarray) -> np.ndarray:
        """(J, nodes) allocation -> (nodes, C) slots (GPUs beyond a node's size are dropped)."""
        cum = np.cumsum(alloc, axis=0)  # (J, nodes)
        jobs = (cum.T[:, :, None] <= self.pos[None, None, :]).sum(axis=1)  # (nodes, C)
        return np.where(self.blocked, self.block, np.minimum(jobs, self.free))

    def decode(self, slots: np.ndarray) -> np.ndarray:
        """(nodes, C) slots -> (J, nodes) allocation."""
        node = np.broadcast_to(np.arange(self.num_nodes)[:, None], slots.shape)
        used = slots < self.J
        flat = slots[used] * self.num_nodes + node[used]
        return np.bincount(flat, minlength=self.J * self.num_nodes).reshape(self.J, self.num_nodes)

    # -- per-job quantities -------------------------------------------------------------------
    def _flat(self, S: np.ndarray) -> np.ndarray:
        """Slots as indices into flattened (P, J + 2) per-(individual, job) tables."""
        return S + (np.arange(len(S), dtype=np.int64) * (self.J + 2))[:, None, None]

    def _runs(self, S: np.ndarray) -> np.ndarray:
        """True at the first slot of each (job, node) run."""
        first = np.empty(S.shape, dtype=bool)
        first[..., 0] = True
        np.not_equal(S[..., 1:], S[..., :-1], out=first[..., 1:])
        return first

    def _per_job(self, S: np.ndarray, with_hash: bool = True):
        """GPUs (K), nodes (N) and allocation hash of every (individual, job); (P, J + 2)."""
        P = len(S)
        size = P * (self.J + 2)
        flat = self._flat(S).reshape(-1)
        K = np.bincount(flat, minlength=size).reshape(P, -1)
        N = np.bincount(flat[self._runs(S).reshape(-1)], minlength=size).reshape(P, -1)
        if not with_hash:
            return K, N, None
        w = np.broadcast_to(self.node_weight[None, :, None], S.shape).reshape(-1)
        H = np.bincount(flat, weights=w, minlength=size).reshape(P, -1)
        return K, N, H

    def hash_individuals(self, S: np.ndarray) -> np.ndarray:
        return (S.reshape(len(S), -1) * self.slot_hash).sum(axis=1)

    # -- fitness ------------------------------------------------------------------------------
    def evaluate(self, S: np.ndarray) -> np.ndarray:
        J = self.J
        if J == 0:
            return np.zeros(len(S))
        K, N, H = self._per_job(S)
        K, N, H = K[:, :J], N[:, :J], H[:, :J]
        changed = (H != self.base_h) | (K != self.base_k)
        return fitness(self.pb.speedup.lookup(N, K), changed, self.penalty, self.pb.p)

    # -- operators ----------------------------------------------------------------------------
    def _merge(self, parts: list[np.ndarray]) -> np.ndarray:
        """Merge extra GPU slots into nodes, keep each node's first slots in job order."""
        merged = np.sort(np.concatenate(parts, axis=-1), axis=-1)[..., : self.C]
        return _pick(self.blocked, self.block, merged)

    def crossover(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """Single-point crossover over jobs: each mating of A[i] and B[i] gives two children
        (rows < cut from one parent, the rest from the other), or copies of the parents."""
        M = len(A)
        cut = np.tile(self.rng.integers(0, max(self.J, 1), size=M), 2)[:, None, None]
        do = np.tile(self.rng.random(M) < self.st.crossover_prob, 2)[:, None, None]
        first = np.concatenate([A, B])
        return _pick(do, self._splice(first, np.concatenate([B, A]), cut), first)

    def _splice(self, A: np.ndarray, B: np.ndarray, cut: np.ndarray) -> np.ndarray:
        """Per node: A's jobs < cut (a prefix, slots being sorted), then B's jobs >= cut."""
        a_n = _count_last(A < cut)[..., None]
        b_lo = _count_last(B < cut)[..., None]
        b_n = _count_last(B < self.J)[..., None] - b_lo
        pos = self.pos
        from_b = _gather_last(B, np.clip(pos - a_n + b_lo, 0, self.C - 1))
        out = _pick(pos < a_n, A, _pick(pos < a_n + b_n, from_b, self.free))
        return _pick(self.blocked, self.block, out)

    def mutate(self, S: np.ndarray) -> np.ndarray:
        """Reset rows to the current allocation, zero some entries, grow on free GPUs.

        All removals and additions are merged into the nodes in one sort at the end; node
        capacity then goes to the jobs first in priority order.
        """
        rng, st, J = self.rng, self.st, self.J
        P = len(S)
        flat = self._flat(S)
        # (1) rows reset to the current allocation, (2) rows whose entries may be zeroed
        reset = (rng.random((P, J + 2)) < st.reset_prob) & self.is_job
        rows = (rng.random((P, J + 2)) < st.zero_row_prob) & self.is_job
        drop = np.take(reset.reshape(-1), flat)
        zero = np.take(rows.reshape(-1), flat)
        if zero.any():  # each (job, node) entry of a selected row: one draw for all its GPUs
            draws = rng.random(S.shape) < st.zero_elem_prob
            runs = self._runs(S)
            for i in range(1, self.C):  # a run's later slots take its first slot's draw
                draws[..., i] = (runs[..., i] & draws[..., i]) | (~runs[..., i] & draws[..., i - 1])
            drop |= zero & draws
        base = np.broadcast_to(self.base_slots, S.shape)
        back = np.take(reset.reshape(-1), self._flat(base))
        combo = np.concatenate([_pick(drop, self.free, S), _pick(back, base, self.free)], axis=-1)
        return self._merge([combo, *self._growth(combo)])

    def _growth(self, combo: np.ndarray) -> list[np.ndarray]:
        """(3) growth requests on nodes with free GPUs (see the module docstring)."""
        rng, J = self.rng, self.J
        caps = self.caps
        used = _count_last(combo < J)  # (P, nodes)
        has_free = used < caps
        if J == 0 or not has_free.any():
            return []
        # the first jobs (in priority order) picking this node, each w.p. 1/|free nodes|:
        # geometric gaps between successive requesters
        q = np.broadcast_to(1.0 / np.maximum(has_free.sum(axis=1, keepdims=True), 1),
                            has_free.shape)
        requests = []
        job = np.full(has_free.shape, -1, dtype=np.int64)
        for _ in range(GROWTH_REQUESTERS):
            job = job + rng.geometric(q)
            ok = has_free & (job < J)
            requests.append((ok, _pick(ok, job, self.free)))
        # a job already on the node (a random slot; nothing if it is idle)
        pick = rng.integers(0, combo.shape[-1], size=has_free.shape)
        job_o = _gather_last(combo, pick[..., None])[..., 0]
        ok_o = has_free & (job_o < J)
        for ok, other in requests:
            ok_o &= job_o != other
        requests.append((ok_o, job_o))
        blocks = []
        for ok, job in requests:
            cur = np.minimum(_count_last(combo == job[..., None]), caps)
            add = ok * (rng.integers(cur, caps + 1) - cur)
            blocks.append(_pick(self.pos < add[..., None], job[..., None], self.free))
        return blocks

    def repair(self, S: np.ndarray) -> np.ndarray:
        """Interference avoidance, per-job GPU and node caps, minimum GPUs (capacity is kept
        by construction). Removed GPUs leave FREE holes (whole or trailing parts of a job's
        run on a node, so runs stay contiguous) until one final sort."""
        J = self.J
        if J == 0:
            return S
        holes = False
        K, N, _ = self._per_job(S, with_hash=False)
        if self.st.avoid_interference:
            dist = (N > 1) & self.is_job
            in_dist = np.take(dist.reshape(-1), self._flat(S))
            if in_dist.any():
                first = _min_last(_pick(in_dist, S, J))[..., None]
                drop = in_dist & (S != first)
                if drop.any():
                    S = _pick(drop, self.free, S)
                    holes = True
        # K, N from before the drops over-approximate: _trim recounts each flagged job's
        # remaining GPUs, so a job no longer over its caps loses nothing.
        over = ((K > self.max_gpus) | (N > self.max_nodes)) & self.is_job
        if over.any():
            S = self._trim(S, over)
            holes = True
        if self.need_min:
            K, _, _ = self._per_job(S, with_hash=False)
            short = (K > 0) & (K < self.min_gpus) & self.is_job
            if short.any():
                S = _pick(np.take(short.reshape(-1), self._flat(S)), self.free, S)
                holes = True
        return np.sort(S, axis=-1) if holes else S

    def _trim(self, S: np.ndarray, over: np.ndarray) -> np.ndarray:
        """Keep each over-cap job's first GPUs (and nodes) in a random node order."""
        J = self.J
        mask = np.take(over.reshape(-1), self._flat(S))
        ii, nn, cc = np.nonzero(mask)
        jj = S[ii, nn, cc]
        key = self.rng.random((len(S), self.num_nodes))[ii, nn]
        order = np.argsort((ii * (J + 2) + jj) * 2.0 + key, kind="stable")
        ii, nn, cc, jj = ii[order], nn[order], cc[order], jj[order]
        group = ii * (J + 2) + jj
        idx = np.arange(len(group))
        new_group = np.ones(len(group), dtype=bool)
        new_group[1:] = group[1:] != group[:-1]
        start = np.maximum.accumulate(np.where(new_group, idx, 0))
        new_node = new_group.copy()
        new_node[1:] |= nn[1:] != nn[:-1]
        nodes_seen = np.cumsum(new_node)
        node_rank = nodes_seen - nodes_seen[start]
        drop = ((idx - start) >= self.max_gpus[jj]) | (node_rank >= self.max_nodes)
        S = S.copy()
        S[ii[drop], nn[drop], cc[drop]] = self.free
        return S

    def select(self, fit: np.ndarray, count: int) -> np.ndarray:
        """Binary tournament: `count` parent indices."""
        pairs = self.rng.integers(0, len(fit), size=(count, 2))
        return np.where(fit[pairs[:, 0]] >= fit[pairs[:, 1]], pairs[:, 0], pairs[:, 1])


def genetic_search(problem: AllocationProblem, settings: SearchSettings | None = None,
                   rng: np.random.Generator | None = None,
                   seeds: np.ndarray | None = None) -> SearchResult:
    """Maximise FITNESS_p over allocations; `seeds` (slot encoding, e.g. last round's final
    population remapped) join the current allocation in the initial population."""
    st = settings or SearchSettings()
    rng = rng or np.random.default_rng()
    s = _Searcher(problem, st, rng)
    pop = s.base_slots[None]
    if seeds is not None and len(seeds) and seeds.shape[1:] == pop.shape[1:]:
        pop = np.concatenate([pop, seeds[: st.population]])
    pop = s.repair(pop)
    _, keep = np.unique(s.hash_individuals(pop), return_index=True)
    pop = pop[np.sort(keep)]
    fit = s.evaluate(pop)
    best = float(fit.max())
    stall = 0
    gens = 0
    n_mate = max(1, st.population // 2)
    while gens < st.generations and s.J > 0:
        gens += 1
        parents = s.select(fit, 2 * n_mate)
        off = s.repair(s.mutate(s.crossover(pop[parents[:n_mate]], pop[parents[n_mate:]])))
        h_pop = s.hash_individuals(pop)
        h_off = s.hash_individuals(off)
        _, first = np.unique(h_off, return_index=True)
        first = np.sort(first)
        first = first[~np.isin(h_off[first], h_pop)]
        if len(first):
            off = off[first]
            pop = np.concatenate([pop, off])
            fit = np.concatenate([fit, s.evaluate(off)])
            order = np.argsort(-fit, kind="stable")[: st.population]
            pop, fit = pop[order], fit[order]
        if fit[0] > best + 1e-12 * abs(best):
            best = float(fit[0])
            stall = 0
        else:
            stall += 1
            if st.patience and stall >= st.patience:
                break
    top = int(np.argmax(fit))
    return SearchResult(allocation=s.decode(pop[top]), fitness=float(fit[top]), population=pop,
                        generations=gens)
