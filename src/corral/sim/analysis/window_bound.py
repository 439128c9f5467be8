"""A lower bound on the average JCT of any schedule for traces of any length: the LP bound
(`corral.sim.analysis.lp_bound`) relaxed so its size grows with the work, not jobs x slots.

The LP of `lp_bound` gives every job a variable in every slot to the horizon and cuts the slots
at every release: at 10,000 jobs that is 10^8 variables. Here, on a grid of equal slots of
length L (not cut at releases), job j has variables only in a window of slots, from the slot
holding its release to a window end E_j, and a "late" fraction z_j for its work after E_j.
In each slot t of its window it has fractions u_jtgl of its work, per GPU type g it may use and
per segment l of that type's rate bound: on `a_jt` (the slot's time after r_j), segment l
(rates from rho_(l-1) to rho_l at `s_l` rate per GPU) holds at most `a_jt (rho_l - rho_(l-1)) /
W_j` and costs `W_j u / s_l` GPU-seconds. Rows: `sum u + z_j = 1`; GPU-seconds per type and slot
at most `N_g L`; on several types a slot's work at most `a_jt` at the job's top rate; `C_j >=
sum_t max(s_t, r_j) u_jt + E_j z_j + p_j / 2` and `C_j >= r_j + max(alone_j, p_j)`.

Why it is never above the average JCT of any schedule the simulator can run: take such a
schedule and let u_jtgl be the fraction of j's work done in slot t on type g, split over the
segments cheapest first, and z_j the fraction done after E_j. The job cannot run before r_j, so
in slot t it runs within `a_jt`; by concavity of its rate bound h_jg, doing work w in time a
takes at least `a g_jg(w / a)` GPU-seconds (g the inverse of h, convex, the segments' costs),
so the GPU-seconds per slot fit the cluster's `N_g L` and each segment's share fits its width;
one type at a time keeps a slot's work within its top rate. Its mean busy time M_j (the work-
weighted mean of the instants it runs) is at least the sum above (every instant in slot t is
at least max(s_t, r_j), every instant after E_j at least E_j), and `C_j >= M_j + p_j / 2`
because at most its top rate it runs for at least p_j ending at C_j (Goemans et al. 2002).
So the schedule's completions are feasible for the LP, whose optimum is at most their mean;
dropping capacity for late work, coarse slots and fewer rate pieces (`fewer_pieces` keeps a
subset of the bound's lines: min over fewer lines is higher) only enlarge the feasible set.
Widening a window never lowers the optimum (work moved past the old end to z keeps
feasibility and lowers M), so windows start from a fluid SRPT schedule and double for jobs
whose late fraction the optimum uses, for a few rounds; the last optimum is the bound.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from corral.sim.analysis.lp_bound import (
    BoundJob,
    LpBound,
    bound_of,
    gpus_by_type,
    solve_mean_completion,
)

#: Most variables the LP is sized for (the slot length grows to keep within it).
DEFAULT_MAX_COLUMNS = 1_000_000
#: Slots over the span of the first windows unless that is over `DEFAULT_MAX_COLUMNS`.
DEFAULT_SLOTS = 600
#: Rounds of widening the windows of jobs whose late fraction the optimum uses.
DEFAULT_ROUNDS = 2
#: A late fraction above this counts as used.
LATE_TOL = 1e-6


@dataclass(frozen=True)
class Segments:
    """A job's rate bound on one GPU type as segments: rate widths and GPU-seconds per work."""

    gpu_type: str
    widths: np.ndarray  # rate added by each segment
    costs: np.ndarray  # GPUs per unit of rate in each segment (0: free)


def rate_segments(pieces: Sequence[tuple[float, float]], cap: float) -> tuple[np.ndarray, np.ndarray]:
    """The inverse of `x -> min over pieces of a x + b` on [0, cap] as segments of rate:
    (widths, GPUs per unit of rate), cheapest first; a positive rate at 0 GPUs is a free one."""
    lines = sorted(set(pieces), key=lambda ab: -ab[0])
    h = lambda x: min(a * x + b for a, b in lines)  # noqa: E731
    widths: list[float] = []
    costs: list[float] = []
    if h(0.0) > 0:
        widths.append(h(0.0))
        costs.append(0.0)
    x = 0.0
    while x < cap:
        value = h(x)
        active = min((ab for ab in lines if ab[0] * x + ab[1] <= value + 1e-12 * max(1.0, value)),
                     key=lambda ab: ab[0])
        a, b = active
        if a <= 0:
            break
        nxt = cap
        for a2, b2 in lines:
            if a2 < a:
                cross = (b2 - b) / (a - a2)
                if x + 1e-12 < cross < nxt:
                    nxt = cross
        widths.append(a * (nxt - x))
        costs.append(1.0 / a)
        x = nxt
    return np.array(widths), np.array(costs)


def fewer_pieces(pieces: Sequence[tuple[float, float]], cap: float,
                 points: int = 8) -> tuple[tuple[float, float], ...]:
    """The lines of `pieces` that are lowest at GPU counts 1, 2, 4, ... and `cap` (at most
    `points` of them): the minimum over a subset of lines is never below the minimum over all,
    so a rate bound built from them stays a rate bound."""
    xs = sorted({min(cap, 2.0 ** i) for i in range(points - 1)} | {cap})
    kept = {min(pieces, key=lambda ab: ab[0] * x + ab[1]) for x in xs}
    return tuple(sorted(kept, key=lambda ab: -ab[0]))


def fluid_srpt_completions(releases: np.ndarray, gpu_s: np.ndarray, gpus: float) -> np.ndarray:
    """Completion times of preemptive SRPT on one machine doing `gpus` GPU-seconds a second,
    each job needing its GPU-seconds: where a good schedule finishes jobs, as first windows."""
    order = np.argsort(releases, kind="stable")
    done = np.empty(len(releases))
    heap: list[tuple[float, int]] = []
    t = float(releases[order[0]])
    for k in range(len(order) + 1):
        nxt = float(releases[order[k]]) if k < len(order) else math.inf
        while heap and t < nxt:
            left, j = heap[0]
            if t + left <= nxt:
                heapq.heappop(heap)
                t += left
                done[j] = t
            else:
                heapq.heapreplace(heap, (left - (nxt - t), j))
                t = nxt
        if k < len(order):
            t = max(t, nxt)
            j = int(order[k])
            heapq.heappush(heap, (float(gpu_s[j]) / gpus, j))
    return done


def windowed_lower_bound(jobs: Sequence[BoundJob], gpus: Mapping[str, float] | float, *,
                         slots: int = DEFAULT_SLOTS, max_columns: int = DEFAULT_MAX_COLUMNS,
                         rounds: int = DEFAULT_ROUNDS, slot_s: float | None = None) -> LpBound:
    """The bound of the module docstring for `jobs` on `gpus` (per GPU type, or a number: one
    type). `slot_s` fixes the slot length; by default `slots` slots over the first windows'
    span, longer where the first round's LP would have over `max_columns` variables."""
    started = time.perf_counter()
    if not jobs:
        raise ValueError("no jobs")
    per_type = gpus_by_type(gpus)
    for j, job in enumerate(jobs):
        for t, _, _ in job.rates:
            if t not in per_type:
                raise ValueError(f"job {j} may run on GPU type {t!r}, which the cluster lacks")
    releases = np.array([j.release_s for j in jobs], dtype=float)
    shortest = np.array([max(j.min_time_s, j.alone_s or 0.0) for j in jobs])
    segments = [[Segments(t, *rate_segments(fewer_pieces(p, cap), cap)) for t, p, cap in j.rates]
                for j in jobs]
    fluid = fluid_srpt_completions(releases, np.array([j.work for j in jobs]),
                                   sum(per_type.values()))
    reach = 2.0 * (np.maximum(fluid, releases + shortest) - releases)  # first windows' lengths
    pieces = np.array([sum(len(s.widths) for s in segs) for segs in segments], dtype=float)
    t0 = float(releases.min())
    length = slot_s if slot_s is not None else _slot_length(releases - t0, reach, pieces,
                                                            slots, max_columns)
    unit = length  # times inside the LP in slots (conditioning)
    ends = releases + reach
    result: LpBound | None = None
    for _ in range(max(1, rounds)):
        windows = np.floor((ends - t0) / length).astype(int) - np.floor(
            (releases - t0) / length).astype(int) + 1
        completions, late = _solve_windows(jobs, segments, per_type, releases, shortest, t0,
                                           length, windows)
        result = bound_of(completions, unit, t0, releases, slots=int(windows.max()),
                          slot_s=length, horizon_s=t0 + length * float(
                              (np.floor((releases - t0) / length) + windows).max()),
                          started=started, method="windowed")
        if not late.any():
            break
        ends = np.where(late, releases + 2.0 * (ends - releases), ends)
    assert result is not None
    return result


def _slot_length(offsets: np.ndarray, reach: np.ndarray, pieces: np.ndarray, max_slots: int,
                 max_columns: int) -> float:
    """The slot length: `max_slots` over the span from the first release to the last window's
    end, or longer where the windows `reach` would hold over `max_columns` variables (each
    job: its pieces in every slot of its window)."""
    length = float((offsets + reach).max()) / max(1, max_slots)

    def columns(slot: float) -> float:
        return float((pieces * (np.floor((offsets + reach) / slot)
                                - np.floor(offsets / slot) + 1)).sum())

    if columns(length) <= max_columns:
        return length
    hi = length
    while columns(hi) > max_columns:
        hi *= 2.0
    lo = hi / 2.0
    for _ in range(30):  # bisection: columns fall as slots lengthen
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if columns(mid) > max_columns else (lo, mid)
    return hi


def _solve_windows(jobs: Sequence[BoundJob], segments: list[list[Segments]],
                   per_type: dict[str, float], releases: np.ndarray, shortest: np.ndarray,
                   t0: float, length: float,
                   windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Build and solve the LP for these windows (in slots, from each job's release slot):
    each job's optimal completion (in slots after `t0`) and whether it uses its late fraction."""
    n = len(jobs)
    types = list(per_type)
    first = np.floor((releases - t0) / length).astype(int)
    num_slots = int((first + windows).max())
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    rhs: list[np.ndarray] = []
    cap_cols: list[np.ndarray] = []  # capacity rows: (type index * slots + slot) per u column
    cap_key: list[np.ndarray] = []
    cap_val: list[np.ndarray] = []
    upper: list[np.ndarray] = []
    starts_w: list[np.ndarray] = []
    owner: list[np.ndarray] = []
    col = 0
    row = n  # rows 0..n-1: mean busy time, added below
    for j, job in enumerate(jobs):
        r = (releases[j] - t0) / length
        slots_j = first[j] + np.arange(windows[j])
        begin = np.maximum(slots_j.astype(float), r)
        avail = slots_j + 1.0 - begin
        work = job.work / length  # rate-slots
        job_cols = []
        for segs in segments[j]:
            g = types.index(segs.gpu_type)
            m = len(segs.widths)
            k = len(slots_j) * m
            idx = col + np.arange(k)
            job_cols.append(idx)
            upper.append((avail[:, None] * segs.widths[None, :] / work).ravel())
            starts_w.append(np.repeat(begin, m))
            cap_cols.append(idx)
            cap_key.append(np.repeat(g * num_slots + slots_j, m))
            cap_val.append(np.tile(work * segs.costs, len(slots_j)))
            owner.append(np.full(k, j))
            col += k
        if len(segments[j]) > 1:  # one type at a time: a slot's work within its top rate
            top = job.max_rate
            for idx in job_cols:
                m = len(idx) // len(slots_j)
                rows.append(row + np.repeat(np.arange(len(slots_j)), m))
                cols.append(idx)
                vals.append(np.ones(len(idx)))
            rhs.append(avail * top / work)
            row += len(slots_j)
    z0 = col
    c0 = z0 + n
    nvar = c0 + n
    u_owner = np.concatenate(owner)
    u_cols = np.arange(z0)
    ends = (first + windows).astype(float)
    # mean busy time rows (0..n-1): sum begin u + E z - C <= -p/2
    rows = [u_owner, np.arange(n), np.arange(n)] + rows
    cols = [u_cols, z0 + np.arange(n), c0 + np.arange(n)] + cols
    vals = [np.concatenate(starts_w), ends, -np.ones(n)] + vals
    rhs = [-shortest / length / 2.0] + rhs
    key = np.concatenate(cap_key)
    used, cap_row = np.unique(key, return_inverse=True)
    rows.append(row + cap_row)
    cols.append(np.concatenate(cap_cols))
    vals.append(np.concatenate(cap_val))
    rhs.append(np.array([per_type[types[k // num_slots]] for k in used]))
    row += len(used)
    a_ub = sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                             shape=(row, nvar))
    a_eq = sparse.csr_matrix((np.ones(z0 + n), (np.concatenate([u_owner, np.arange(n)]),
                                                np.concatenate([u_cols, z0 + np.arange(n)]))),
                             shape=(n, nvar))
    lower = np.zeros(nvar)
    lower[c0:] = (releases - t0 + shortest) / length
    up = np.concatenate(upper + [np.full(n, np.inf), np.full(n, np.inf)])
    x = solve_mean_completion(a_ub, np.concatenate(rhs), a_eq, c0, lower, up)
    return x[c0:], x[z0:c0] > LATE_TOL
