"""ONES's online evolutionary search over schedules (ONES (SC'21) §3.2.2, Eq. 8, Algorithm 1).

A genome has one gene per GPU (node order): the job on it, or -1 if idle; per-GPU batches are
fixed, so gene counts set global batches. Candidates stay *valid* (caps, frozen GPUs) and
*work-conserving* (SRUF sums only running jobs, so an emptier schedule would always win).
Operators on unfrozen GPUs: refresh (drop leavers, enforce caps, one GPU per new job, fill),
fill (idle GPU to the largest sampled `1/T(n+1) - 1/T(n)`), uniform crossover, uniform mutation
(preempted jobs' GPUs to *other* jobs first), reorder. Selection keeps the best `population`
of the deduplicated pool under one shared draw of progress (common random numbers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Round", "Search"]

IDLE = -1


@dataclass
class Round:
    """What one scheduling round searches over (jobs are indexed 0..J-1)."""

    caps: np.ndarray  # (J,) most GPUs each job may hold now
    frozen: np.ndarray  # (G,) job held fixed on each GPU, IDLE where free to change
    new: np.ndarray  # (J,) bool: never ran; refresh gives each one GPU
    epoch_s: np.ndarray  # (J, G+1) seconds per epoch on n GPUs (column 0 unused)
    done: np.ndarray  # (J,) epochs processed
    alpha: np.ndarray  # (J,) Beta parameters of each job's progress
    beta: np.ndarray

    def __post_init__(self) -> None:
        self.free_pos = np.flatnonzero(self.frozen == IDLE)
        self.num_jobs = len(self.caps)
        self.frozen_jobs = np.zeros(self.num_jobs, dtype=bool)
        self.frozen_jobs[self.frozen[self.frozen != IDLE]] = True

    def remaining(self, rng: np.random.Generator, draws: int | None = None) -> np.ndarray:
        """Each job's remaining epochs `s (1 - p) / p` (Eq. 7), p drawn from its Beta; with
        `draws`, that many independent draws as rows."""
        shape = None if draws is None else (draws, self.num_jobs)
        p = np.clip(rng.beta(self.alpha, self.beta, size=shape), 1e-6, 1.0)
        return self.done * (1.0 - p) / p

    def counts(self, pop: np.ndarray) -> np.ndarray:
        """(P, J) GPUs of each job in each candidate."""
        rows = np.repeat(np.arange(pop.shape[0]), pop.shape[1])
        flat = pop.ravel()
        keep = flat != IDLE
        out = np.zeros((pop.shape[0], self.num_jobs), dtype=np.int64)
        np.add.at(out, (rows[keep], flat[keep]), 1)
        return out

    def scores(self, pop: np.ndarray, remaining: np.ndarray) -> np.ndarray:
        """SRUF utilisation `sum_j n_j T_j(n_j)` of each candidate (Eq. 3, 5, 8)."""
        n = self.counts(pop)
        per_epoch = self.epoch_s[np.arange(self.num_jobs)[None, :], n]
        return np.where(n > 0, n * remaining[None, :] * per_epoch, 0.0).sum(axis=1)


class Search:
    """The evolutionary operators (on batches of genomes, in place) and a round of evolution."""

    def __init__(self, population: int, pairs: int, mutants: int, rate: float,
                 rng: np.random.Generator) -> None:
        self.population, self.pairs, self.mutants, self.rate = population, pairs, mutants, rate
        self.rng = rng

    # -- repair --------------------------------------------------------------------------------
    def clamp(self, pop: np.ndarray, r: Round) -> None:
        """Frozen GPUs as given, frozen jobs nowhere else, no job above its cap (its last GPUs go)."""
        fixed = r.frozen != IDLE
        pop[:, fixed] = r.frozen[fixed]
        genes = pop[:, r.free_pos]
        lookup = np.append(r.frozen_jobs, True)  # IDLE -> index J -> True (stays IDLE)
        genes[lookup[genes]] = IDLE
        rank = _occurrence_rank(genes, r.num_jobs)
        caps = np.append(r.caps, genes.shape[1])
        genes[rank >= caps[genes]] = IDLE
        pop[:, r.free_pos] = genes

    def place_new(self, pop: np.ndarray, r: Round) -> None:
        """One GPU for each new job missing from a candidate: an idle one, else the last GPU of
        the job holding the most."""
        free = r.free_pos
        for j in np.flatnonzero(r.new):
            genes = pop[:, free]
            rows = np.flatnonzero(~np.any(genes == j, axis=1))
            if rows.size == 0 or free.size == 0:
                continue
            sub = genes[rows]
            idle = sub == IDLE
            col = np.where(idle.any(axis=1), np.argmax(idle, axis=1), -1)
            for k in np.flatnonzero(col < 0):
                present = sub[k][sub[k] != IDLE]
                victim = np.argmax(np.bincount(present, minlength=r.num_jobs))
                col[k] = np.flatnonzero(sub[k] == victim)[-1]
            sub[np.arange(rows.size), col] = j
            genes[rows] = sub
            pop[:, free] = genes

    def fill(self, pop: np.ndarray, r: Round, exclude: np.ndarray | None = None) -> None:
        """Give idle GPUs to the jobs with the largest sampled gains per GPU (greedy).

        The gain of a job's next GPU is `1/T(n+1) - 1/T(n)`, with `1/T(0) = 0` and jobs that
        have done nothing yet (T = 0) first. In each candidate the idle GPUs go to the largest
        gains over all (job, next GPU) pairs -- the one-GPU-at-a-time greedy choice when each
        job's gains fall as it grows -- under one draw of every job's progress per candidate.
        `exclude`: (P, J) jobs a candidate must not give GPUs to.
        """
        if pop.shape[0] == 0 or r.num_jobs == 0:
            return
        genes = pop[:, r.free_pos]
        idle = (genes == IDLE).sum(axis=1)
        if not idle.any():
            return
        n = r.counts(pop)
        room = np.where(r.frozen_jobs[None, :], 0, np.maximum(r.caps[None, :] - n, 0))
        if exclude is not None:
            room[exclude] = 0
        room[idle == 0] = 0
        width = int(min(room.max(initial=0), idle.max()))
        if width == 0:
            return
        inv = self._inverse_time(r, r.remaining(self.rng, pop.shape[0]))
        steps = np.arange(width)
        have = n[:, :, None] + steps  # (P, J, width): GPUs before each extra one
        top = inv.shape[2] - 1
        nxt = _pick(inv, np.minimum(have + 1, top))
        now = _pick(inv, np.minimum(have, top))
        with np.errstate(invalid="ignore"):
            gain = nxt - now
        gain = np.where(steps < room[:, :, None], np.where(np.isnan(gain), 0.0, gain), -np.inf)
        flat = gain.reshape(len(pop), -1)
        order = np.argsort(-flat, axis=1, kind="stable")
        usable = np.minimum(room, width).sum(axis=1)
        take = np.arange(flat.shape[1])[None, :] < np.minimum(idle, usable)[:, None]
        for b in np.flatnonzero(take.any(axis=1)):
            per_job = np.bincount(order[b, take[b]] // width, minlength=r.num_jobs)
            slots = np.flatnonzero(genes[b] == IDLE)[: per_job.sum()]
            genes[b, slots] = np.repeat(np.arange(r.num_jobs), per_job)
        pop[:, r.free_pos] = genes

    @staticmethod
    def _inverse_time(r: Round, remaining: np.ndarray) -> np.ndarray:
        """(P, J, G+1) completion rate 1/T_j(n): 0 at n = 0, inf for jobs with nothing done."""
        with np.errstate(divide="ignore"):
            inv = 1.0 / (remaining[:, :, None] * r.epoch_s[None, :, :])
        inv[:, :, 0] = 0.0
        inv[..., 1:][remaining <= 0] = np.inf
        return inv

    def refresh(self, pop: np.ndarray, r: Round) -> None:
        """Bring candidates up to date: validity, one GPU per new job, then fill."""
        self.clamp(pop, r)
        self.place_new(pop, r)
        self.fill(pop, r)

    def reorder(self, pop: np.ndarray, r: Round) -> None:
        """Pack each job's free GPUs together, jobs in order of first appearance."""
        genes = pop[:, r.free_pos]
        if genes.size == 0:
            return
        size = genes.shape[1]
        first = np.full((len(genes), r.num_jobs + 1), size)
        rows = np.repeat(np.arange(len(genes)), size)
        cols = np.where(genes == IDLE, r.num_jobs, genes).ravel()
        np.minimum.at(first, (rows, cols), np.tile(np.arange(size), len(genes)))
        first[:, r.num_jobs] = size + 1  # idle GPUs last
        key = np.take_along_axis(first, cols.reshape(genes.shape), axis=1)
        pop[:, r.free_pos] = np.take_along_axis(genes, np.argsort(key, axis=1, kind="stable"), axis=1)

    def random_genomes(self, r: Round, base: np.ndarray, count: int) -> np.ndarray:
        """Random jobs on every free GPU ("running a random job on each GPU"), repaired."""
        pop = np.repeat(base[None, :], count, axis=0)
        if r.num_jobs:
            pop[:, r.free_pos] = self.rng.integers(0, r.num_jobs, (count, r.free_pos.size))
        self.refresh(pop, r)
        self.reorder(pop, r)
        return pop

    # -- population operators ----------------------------------------------------------------
    def crossover(self, pop: np.ndarray, r: Round) -> np.ndarray:
        """Uniform crossover of `pairs` random parent pairs: two repaired children each."""
        if pop.shape[0] < 2 or self.pairs == 0:
            return pop[:0]
        idx = self.rng.integers(0, pop.shape[0], (self.pairs, 2))
        a, b = pop[idx[:, 0]], pop[idx[:, 1]]
        swap = self.rng.random(a.shape) < 0.5
        children = np.concatenate([np.where(swap, b, a), np.where(swap, a, b)])
        self.refresh(children, r)
        self.reorder(children, r)
        return children

    def mutate(self, pop: np.ndarray, r: Round) -> np.ndarray:
        """Uniform mutation: preempt each job with probability `rate`, refill with others."""
        if pop.shape[0] == 0 or self.mutants == 0:
            return pop[:0]
        out = pop[self.rng.integers(0, pop.shape[0], self.mutants)].copy()
        hit = (self.rng.random((self.mutants, r.num_jobs)) < self.rate) & ~r.frozen_jobs
        genes = out[:, r.free_pos]
        lookup = np.concatenate([hit, np.zeros((self.mutants, 1), dtype=bool)], axis=1)
        genes[np.take_along_axis(lookup, np.where(genes == IDLE, r.num_jobs, genes), axis=1)] = IDLE
        out[:, r.free_pos] = genes
        self.fill(out, r, exclude=hit)
        self.fill(out, r)  # GPUs no other job can use go back: candidates stay work-conserving
        self.reorder(out, r)
        return out

    def select(self, pool: np.ndarray, r: Round) -> tuple[np.ndarray, np.ndarray]:
        """The best `population` distinct candidates under one shared draw, best first."""
        pool = pool[_distinct_rows(pool)]
        scores = r.scores(pool, r.remaining(self.rng))
        order = np.argsort(scores, kind="stable")[: self.population]
        return pool[order], scores[order]

    def evolve(self, pop: np.ndarray, r: Round, iterations: int) -> np.ndarray:
        """Refresh the population, evolve it, and return it best first."""
        pop = pop.copy()
        self.refresh(pop, r)
        pop, _ = self.select(pop, r)
        for _ in range(iterations):
            pool = np.concatenate([pop, self.crossover(pop, r), self.mutate(pop, r)])
            pop, _ = self.select(pool, r)
        return pop


def _pick(table: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """table[p, j, idx[p, j, k]] for a (P, J, N) table and (P, J, K) indices."""
    return np.take_along_axis(table, idx, axis=2)


def _occurrence_rank(genes: np.ndarray, num_jobs: int) -> np.ndarray:
    """For each gene, how many earlier genes in its row hold the same job (IDLE: 0)."""
    order = np.argsort(np.where(genes == IDLE, num_jobs, genes), axis=1, kind="stable")
    ordered = np.take_along_axis(genes, order, axis=1)
    pos = np.arange(genes.shape[1])
    start = np.where(np.diff(ordered, axis=1, prepend=IDLE - 1) != 0, pos, 0)
    rank_sorted = pos - np.maximum.accumulate(start, axis=1)
    rank = np.empty_like(rank_sorted)
    np.put_along_axis(rank, order, rank_sorted, axis=1)
    return np.where(genes == IDLE, 0, rank)


def _distinct_rows(pop: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct row (rows compared by a 64-bit hash)."""
    weights = np.random.default_rng(12345).integers(1, 2**62, pop.shape[1], dtype=np.int64)
    _, first = np.unique((pop + 1).astype(np.int64) @ weights, return_index=True)
    return np.sort(first)
