"""A relaxation lower bound on the average JCT of any schedule: a time-indexed linear program.

Jobs are `BoundJob`s (release r_j, work W_j, per GPU type g it may use a concave piecewise-linear
rate bound h_jg; see `corral.sim.analysis.bound_jobs`); slots run to a horizon H (later work
counts as done at H). Variables: GPUs `x_jtg`, work fractions `y_jtg` (after release) and `z_j`
(after H), `C_j`. Constraints: `sum_j x_jtg <= N_g`, `x_jtg <= K_jg`; `W_j y_jtg <= len_t (a_l
x_jtg + b_l)` per piece (valid by concavity); on several types a slot's work is at most `len_t`
at the job's top rate (one type at a time; two in one slot only relaxes); mean busy time `C_j >=
M_j + p_j / 2`, `M_j = sum_t t_start(t) y_jt + H z_j`, `p_j = W_j / max_g h_jg(K_jg)` (Goemans
et al. 2002); `C_j >= r_j + alone_j`. A cluster of one type is the one-type case of the same LP.
`mean(C_j - r_j)`, less 1e-6 of max C_j (solver tolerance), bounds the average JCT. Solved with
scipy's HiGHS. Its variables grow as jobs x slots; `corral.sim.analysis.window_bound` relaxes it
further to reach traces of any length.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

#: Default number of uniform slots over [first release, horizon] (release times are added).
DEFAULT_SLOTS = 200
#: Relative slack taken off the LP optimum for the solver's tolerance.
SOLVER_SLACK = 1e-6


#: One GPU type a job may use: (type, pieces, max_gpus); its rate holding x GPUs of that type
#: (0 <= x <= max_gpus) is at most min over pieces (a, b) of a x + b.
TypeRate = tuple[str, tuple[tuple[float, float], ...], float]


@dataclass(frozen=True)
class BoundJob:
    """One job as the bound sees it.

    `work` is in rate-seconds common to every GPU type: at rate r the job needs `work / r`
    seconds (`corral.sim.analysis.bound_jobs`: a job's least GPU-seconds, so a rate is a
    speedup). `rates` holds each GPU type the job may run on with its concave rate bound there
    (`TypeRate`); a cluster of one type is the one-type case (`one_type`, type ""). `alone_s` is
    a lower bound on its completion minus release (None: its shortest processing time).
    """

    release_s: float
    work: float
    rates: tuple[TypeRate, ...]
    alone_s: float | None = None

    @classmethod
    def one_type(cls, release_s: float, work: float, pieces: tuple[tuple[float, float], ...],
                 max_gpus: float, alone_s: float | None = None) -> BoundJob:
        """A job on a cluster of one (unnamed) GPU type."""
        return cls(release_s, work, (("", pieces, float(max_gpus)),), alone_s)

    @property
    def max_rate(self) -> float:
        """The fastest the job can go: its rate bound at its GPU cap on its fastest type."""
        return max(min(a * cap + b for a, b in pieces) for _, pieces, cap in self.rates)

    @property
    def min_time_s(self) -> float:
        """Shortest processing time: all of its work at its highest rate."""
        return self.work / self.max_rate


def hull_pieces(speedups: Sequence[float]) -> tuple[tuple[tuple[float, float], ...], int]:
    """Lines of the upper concave hull of (0, 0) and (k, S(k)), k = 1.., and the GPU cap.

    `speedups[k-1]` is the best rate on k GPUs (inf or nan: not possible on k GPUs, skipped).
    A job never needs more GPUs than where its best rate is first reached, so the cap is that
    count; the hull of the running maximum is non-decreasing. Returns (pieces, cap).
    """
    pts = [(0.0, 0.0)]
    best = 0.0
    for k, s in enumerate(speedups, start=1):
        if s is None or not math.isfinite(s) or s <= best:
            continue
        best = float(s)
        pts.append((float(k), best))
    if len(pts) == 1:
        raise ValueError("a job needs a positive finite rate on some GPU count")
    hull: list[tuple[float, float]] = []
    for p in pts:  # monotone chain, upper hull (x increasing)
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) >= 0:  # hull[-1] not above
                hull.pop()
            else:
                break
        hull.append(p)
    pieces = []
    for (x1, y1), (x2, y2) in zip(hull, hull[1:]):
        a = (y2 - y1) / (x2 - x1)
        pieces.append((a, y1 - a * x1))
    return tuple(pieces), int(hull[-1][0])


@dataclass(frozen=True)
class LpBound:
    """The solved bound: mean of (C_j - r_j), per-job C_j - r_j, and how it was computed
    (`method`: "exact", this module's LP; "windowed", `corral.sim.analysis.window_bound`)."""

    avg_jct_s: float
    jct_s: tuple[float, ...]
    slots: int
    slot_s: float
    horizon_s: float
    solve_s: float
    method: str = "exact"


def default_horizon(jobs: Sequence[BoundJob]) -> float:
    """End of a feasible schedule: jobs in release order, each alone at its highest rate."""
    t = -math.inf
    for job in sorted(jobs, key=lambda j: j.release_s):
        t = max(t, job.release_s) + max(job.min_time_s, job.alone_s or 0.0)
    return t


def gpus_by_type(gpus: Mapping[str, float] | float) -> dict[str, float]:
    """The cluster's GPUs per type; a bare number is a cluster of one unnamed type ("")."""
    if isinstance(gpus, Mapping):
        return {t: float(g) for t, g in gpus.items()}
    return {"": float(gpus)}


def lp_lower_bound(jobs: Sequence[BoundJob], gpus: Mapping[str, float] | float, *,
                   slots: int = DEFAULT_SLOTS, horizon_s: float | None = None) -> LpBound:
    """Solve the LP of the module docstring for `jobs` on `gpus` (per GPU type, or a number:
    one type), one set of variables per job, slot and type the job may use."""
    started = time.perf_counter()
    n = len(jobs)
    if n == 0:
        raise ValueError("no jobs")
    per_type = gpus_by_type(gpus)
    types = list(per_type)
    releases = np.array([j.release_s for j in jobs], dtype=float)
    horizon = float(horizon_s if horizon_s is not None else default_horizon(jobs))
    t0, unit, starts, lens = _time_slots(releases, horizon, slots)
    num_slots = len(starts)
    h = (horizon - t0) / unit
    first_slot = np.searchsorted(starts + lens, releases, side="right")

    # columns: per job, per type it may use, x and y for each slot at or after its release
    layout: list[list[tuple[str, np.ndarray, tuple, float]]] = []
    offset = 0
    for j, job in enumerate(jobs):
        cnt = num_slots - first_slot[j]
        per = []
        for t, pieces, cap in job.rates:
            if t not in per_type:
                raise ValueError(f"job {j} may run on GPU type {t!r}, which the cluster lacks")
            per.append((t, np.arange(offset, offset + 2 * cnt, 2), pieces, cap))
            offset += 2 * cnt
        layout.append(per)
    z0 = offset
    c0 = z0 + n
    nvar = c0 + n

    rows, cols, vals, rhs = [], [], [], []
    eq_rows, eq_cols, eq_vals = [], [], []
    row = 0
    cap_rows: dict[str, list[list[int]]] = {t: [[] for _ in range(num_slots)] for t in types}
    upper = np.full(nvar, np.inf)
    lower = np.zeros(nvar)
    for j, job in enumerate(jobs):
        fs = first_slot[j]
        seg = lens[fs:] / unit
        all_ys = []
        for t, xs, pieces, cap in layout[j]:
            ys = xs + 1
            all_ys.append(ys)
            for a, b in pieces:
                r = row + np.arange(len(xs))
                rows += [r, r]
                cols += [ys, xs]
                vals += [np.full(len(xs), job.work / unit), -seg * a]
                rhs.append(seg * b)
                row += len(xs)
            upper[xs] = cap
            for k, s in enumerate(range(fs, num_slots)):
                cap_rows[t][s].append(xs[k])
        ys_all = np.concatenate(all_ys)
        if len(layout[j]) > 1:  # one type at a time: the slot's work at most at the top rate
            cnt = num_slots - fs
            r = row + np.arange(cnt)
            for ys in all_ys:
                rows.append(r)
                cols.append(ys)
                vals.append(np.full(cnt, job.work / unit))
            rhs.append(seg * job.max_rate)
            row += cnt
        eq_rows += [np.full(len(ys_all) + 1, j)]
        eq_cols += [np.append(ys_all, z0 + j)]
        eq_vals += [np.ones(len(ys_all) + 1)]
        start_w = np.concatenate([(starts[fs:] - t0) / unit for _ in all_ys])
        rows += [np.full(len(ys_all) + 2, row)]
        cols += [np.concatenate([ys_all, [z0 + j, c0 + j]])]
        vals += [np.concatenate([start_w, [h, -1.0]])]
        rhs.append(np.array([-job.min_time_s / unit / 2.0]))
        row += 1
        lower[c0 + j] = (job.release_s - t0 + max(job.alone_s or 0.0, job.min_time_s)) / unit
    a_ub, b_ub = _inequalities(rows, cols, vals, rhs, row, nvar,
                               ((cap_rows[t][s], per_type[t])
                                for t in types for s in range(num_slots)))
    a_eq = _csr(eq_rows, eq_cols, eq_vals, (n, nvar))
    x = solve_mean_completion(a_ub, b_ub, a_eq, c0, lower, upper)
    return bound_of(x[c0:], unit, t0, releases, slots=num_slots,
                    slot_s=float((horizon - t0) / max(1, slots)), horizon_s=horizon,
                    started=started)


def _csr(rows: list, cols: list, vals: list, shape: tuple[int, int]) -> sparse.csr_matrix:
    """A sparse matrix from per-row lists of row indices, column indices and values."""
    return sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                             shape=shape)


def _inequalities(rows: list, cols: list, vals: list, rhs: list, row: int, nvar: int,
                  capacity: Iterable[tuple[Sequence[int], float]]
                  ) -> tuple[sparse.csr_matrix, np.ndarray]:
    """(A_ub, b_ub): the rows built so far (`row` of them) and one capacity row per
    (variables of a time slot, GPUs they share) in `capacity` with any variable."""
    for idx, gpus in capacity:
        if idx:
            rows.append(np.full(len(idx), row))
            cols.append(np.asarray(idx))
            vals.append(np.ones(len(idx)))
            rhs.append(np.array([gpus]))
            row += 1
    return _csr(rows, cols, vals, (row, nvar)), np.concatenate(rhs)


def _time_slots(releases: np.ndarray, horizon: float,
                slots: int) -> tuple[float, float, np.ndarray, np.ndarray]:
    """The LP's time grid: (t0, unit, slot starts, slot lengths) for `slots` equal slots from
    the first release to `horizon`, cut at every release so a release is a slot boundary;
    `unit` scales time inside the LP (conditioning)."""
    t0 = float(releases.min())
    unit = max((horizon - t0) / 100.0, 1e-9)
    grid = np.linspace(t0, horizon, max(1, slots) + 1)
    bounds_t = np.unique(np.concatenate([grid, releases[releases < horizon]]))
    starts, lens = bounds_t[:-1], np.diff(bounds_t)
    keep = lens > 1e-9 * max(1.0, horizon - t0)
    return t0, unit, starts[keep], lens[keep]


def solve_mean_completion(a_ub: sparse.csr_matrix, b_ub: np.ndarray, a_eq: sparse.csr_matrix,
                          c0: int, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """The optimal variables of the LP `min mean(v[c0:])` under `a_ub v <= b_ub`, `a_eq v = 1`
    and the bounds, solved with HiGHS; a RuntimeError when it does not solve."""
    n = a_eq.shape[0]
    cost = np.zeros(a_ub.shape[1])
    cost[c0:] = 1.0 / n
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.ones(n),
                  bounds=np.column_stack([lower, upper]), method="highs")
    if res.status != 0:
        raise RuntimeError(f"the bound's LP did not solve: {res.message}")
    return np.asarray(res.x)


def bound_of(completions: np.ndarray, unit: float, t0: float, releases: np.ndarray, *,
             slots: int, slot_s: float, horizon_s: float, started: float,
             method: str = "exact") -> LpBound:
    """The bound from the LP's optimal completion times (in `unit`s after `t0`): each JCT less
    the solver's slack (`SOLVER_SLACK` of the largest)."""
    slack = SOLVER_SLACK * unit * max(1.0, float(np.abs(completions).max()))
    c = completions * unit + t0
    jct = tuple(float(v) - slack for v in c - releases)
    avg = float(np.mean(c - releases)) - slack
    return LpBound(avg_jct_s=avg, jct_s=jct, slots=slots, slot_s=slot_s, horizon_s=horizon_s,
                   solve_s=time.perf_counter() - started, method=method)
