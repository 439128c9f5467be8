"""A relaxation lower bound on the average JCT of any schedule: a time-indexed linear program.

Jobs are `BoundJob`s (release r_j, work W_j, concave piecewise-linear rate bound h_j; see
`corral.sim.analysis.bound_jobs`); slots run to a horizon H (later work counts as done at H).
Variables: GPUs `x_jt`, work fractions `y_jt` (after release) and `z_j` (after H), `C_j`.
Constraints: `sum_j x_jt <= N`, `x_jt <= K_j`; `W_j y_jt <= len_t (a_l x_jt + b_l)` per piece
(valid by concavity); mean busy time `C_j >= M_j + p_j / 2`, `M_j = sum_t t_start(t) y_jt + H
z_j`, `p_j = W_j / h_j(K_j)` (Goemans et al. 2002); `C_j >= r_j + alone_j`. `mean(C_j - r_j)`,
less 1e-6 of max C_j (solver tolerance), bounds the average JCT. Solved with scipy's HiGHS.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

#: Default number of uniform slots over [first release, horizon] (release times are added).
DEFAULT_SLOTS = 200
#: Relative slack taken off the LP optimum for the solver's tolerance.
SOLVER_SLACK = 1e-6


@dataclass(frozen=True)
class BoundJob:
    """One job as the bound sees it.

    `work` is in rate-seconds: at rate r the job needs `work / r` seconds (the simulator uses a
    job's best time on one GPU, so a rate is a speedup). `pieces` are lines (a, b): the job's
    rate holding x GPUs (0 <= x <= `max_gpus`) is at most min over pieces of a x + b. `alone_s`
    is a lower bound on its completion minus release (None: its shortest processing time).
    """

    release_s: float
    work: float
    pieces: tuple[tuple[float, float], ...]
    max_gpus: float
    alone_s: float | None = None

    @property
    def max_rate(self) -> float:
        """The rate bound at `max_gpus`: the fastest the job can go."""
        return min(a * self.max_gpus + b for a, b in self.pieces)

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
    """The solved bound: mean of (C_j - r_j), per-job C_j - r_j, and how it was computed."""

    avg_jct_s: float
    jct_s: tuple[float, ...]
    slots: int
    slot_s: float
    horizon_s: float
    solve_s: float


def default_horizon(jobs: Sequence[BoundJob]) -> float:
    """End of a feasible schedule: jobs in release order, each alone at its highest rate."""
    t = -math.inf
    for job in sorted(jobs, key=lambda j: j.release_s):
        t = max(t, job.release_s) + max(job.min_time_s, job.alone_s or 0.0)
    return t


def lp_lower_bound(jobs: Sequence[BoundJob], gpus: float, *, slots: int = DEFAULT_SLOTS,
                   horizon_s: float | None = None) -> LpBound:
    """Solve the LP of the module docstring for `jobs` on `gpus` GPUs (see there)."""
    started = time.perf_counter()
    n = len(jobs)
    if n == 0:
        raise ValueError("no jobs")
    releases = np.array([j.release_s for j in jobs], dtype=float)
    horizon = float(horizon_s if horizon_s is not None else default_horizon(jobs))
    t0, unit, starts, lens = _time_slots(releases, horizon, slots)
    num_slots = len(starts)
    h = (horizon - t0) / unit

    # columns: per job, x and y for each slot at or after its release, then z_j, then C_j
    cols_x: list[np.ndarray] = []
    first_slot = np.searchsorted(starts + lens, releases, side="right")  # slots ending after r_j
    # a release is a slot boundary, so slot first_slot[j] starts at or after r_j
    offset = 0
    for j in range(n):
        cnt = num_slots - first_slot[j]
        cols_x.append(np.arange(offset, offset + 2 * cnt, 2))
        offset += 2 * cnt
    z0 = offset
    c0 = z0 + n
    nvar = c0 + n

    rows, cols, vals, rhs = [], [], [], []  # inequality rows A x <= b
    eq_rows, eq_cols, eq_vals = [], [], []
    row = 0
    cap_rows: list[list[int]] = [[] for _ in range(num_slots)]
    upper = np.full(nvar, np.inf)
    lower = np.zeros(nvar)
    for j, job in enumerate(jobs):
        fs = first_slot[j]
        xs = cols_x[j]
        ys = xs + 1
        seg = lens[fs:] / unit
        for a, b in job.pieces:
            # work * y - len * a * x <= len * b   (time in units: rates per unit time)
            r = row + np.arange(len(xs))
            rows += [r, r]
            cols += [ys, xs]
            vals += [np.full(len(xs), job.work / unit), -seg * a]
            rhs.append(seg * b)
            row += len(xs)
        upper[xs] = job.max_gpus
        for k, t in enumerate(range(fs, num_slots)):
            cap_rows[t].append(xs[k])
        # sum y + z = 1
        eq_rows += [np.full(len(ys) + 1, j)]
        eq_cols += [np.append(ys, z0 + j)]
        eq_vals += [np.ones(len(ys) + 1)]
        # M_j - C_j <= -p_j/2 :  sum start*y + h*z - C <= -p/2
        rows += [np.full(len(ys) + 2, row)]
        cols += [np.concatenate([ys, [z0 + j, c0 + j]])]
        vals += [np.concatenate([(starts[fs:] - t0) / unit, [h, -1.0]])]
        rhs.append(np.array([-job.min_time_s / unit / 2.0]))
        row += 1
        lower[c0 + j] = (job.release_s - t0 + max(job.alone_s or 0.0, job.min_time_s)) / unit
    a_ub, b_ub = _inequalities(rows, cols, vals, rhs, row, nvar,
                               ((cap_rows[t], float(gpus)) for t in range(num_slots)))
    a_eq = _csr(eq_rows, eq_cols, eq_vals, (n, nvar))
    return _solve(a_ub, b_ub, a_eq, c0, lower, upper, unit, t0, releases,
                  num_slots, float((horizon - t0) / max(1, slots)), horizon, started)


@dataclass(frozen=True)
class TypedBoundJob:
    """One job as the bound sees it on a cluster of several GPU types.

    `work` is in rate-seconds common to all types (`corral.sim.analysis.bound_jobs`); `rates`
    maps each GPU type the job may run on to (pieces, max_gpus): its rate holding x GPUs of that
    type is at most min over pieces of a x + b, for 0 <= x <= max_gpus. `alone_s` as `BoundJob`.
    """

    release_s: float
    work: float
    rates: tuple[tuple[str, tuple[tuple[float, float], ...], float], ...]
    alone_s: float | None = None

    @property
    def max_rate(self) -> float:
        """The fastest the job can go, on its fastest type."""
        return max(min(a * cap + b for a, b in pieces) for _, pieces, cap in self.rates)

    @property
    def min_time_s(self) -> float:
        return self.work / self.max_rate


def lp_lower_bound_typed(jobs: Sequence[TypedBoundJob], gpus: dict[str, float], *,
                         slots: int = DEFAULT_SLOTS, horizon_s: float | None = None) -> LpBound:
    """The LP of the module docstring on a cluster of several GPU types (`gpus`: per type).

    Per job, slot and type it may use: GPUs `x_jtg` (capped per type) and work fractions
    `y_jtg`, `W_j y_jtg <= len_t (a x_jtg + b)` per piece of its rate on type g; capacity
    `sum_j x_jtg <= N_g` per type; a job's work in a slot is also at most `len_t` at its highest
    rate (it runs on one type at a time). Mean busy time as before, with `p_j` the job's
    shortest processing time on its fastest type. Letting a job use two types in one slot only
    relaxes the schedule, so it stays a lower bound.
    """
    started = time.perf_counter()
    n = len(jobs)
    if n == 0:
        raise ValueError("no jobs")
    types = list(gpus)
    releases = np.array([j.release_s for j in jobs], dtype=float)
    horizon = float(horizon_s if horizon_s is not None else default_horizon(jobs))  # type: ignore[arg-type]
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
                               ((cap_rows[t][s], float(gpus[t]))
                                for t in types for s in range(num_slots)))
    a_eq = _csr(eq_rows, eq_cols, eq_vals, (n, nvar))
    return _solve(a_ub, b_ub, a_eq, c0, lower, upper, unit, t0, releases,
                  num_slots, float((horizon - t0) / max(1, slots)), horizon, started)


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


def _solve(a_ub: sparse.csr_matrix, b_ub: np.ndarray, a_eq: sparse.csr_matrix, c0: int,
           lower: np.ndarray, upper: np.ndarray, unit: float, t0: float, releases: np.ndarray,
           num_slots: int, slot_s: float, horizon: float, started: float) -> LpBound:
    """Minimise the mean completion time (variables from `c0` on, in `unit`s after `t0`) under
    the built constraints with HiGHS; the bound is each JCT less the solver's slack."""
    n = a_eq.shape[0]
    cost = np.zeros(a_ub.shape[1])
    cost[c0:] = 1.0 / n
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.ones(n),
                  bounds=np.column_stack([lower, upper]), method="highs")
    if res.status != 0:
        raise RuntimeError(f"the bound's LP did not solve: {res.message}")
    slack = SOLVER_SLACK * unit * max(1.0, float(np.abs(res.x[c0:]).max()))
    c = res.x[c0:] * unit + t0
    jct = tuple(float(v) - slack for v in c - releases)
    avg = float(np.mean(c - releases)) - slack
    return LpBound(avg_jct_s=avg, jct_s=jct, slots=num_slots, slot_s=slot_s, horizon_s=horizon,
                   solve_s=time.perf_counter() - started)
