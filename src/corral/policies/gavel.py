"""`gavel` and `gavel-ftf`: Gavel's heterogeneity-aware max-min fairness (LAS) and finish-time
fairness over per-type throughputs, realised in rounds.

Gavel (OSDI'20) §4.1 (LAS as an LP over the allocation X: `max_min_allocation`), §4.2
(finish-time fairness: `finish_time_fair_allocation`) and §5 (rounds: `Gavel._assign`), as
published and as its public artifact solves them; docs/policies.md describes both. Decided here,
where the paper says nothing: a gang never spans types, at most the GPUs of its largest allowed
type (`gang_gpus`); X is recomputed only when the set of jobs changes; a job with no throughput
model counts as equally fast on every type; idle GPUs go to waiting jobs within a round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import Assignment, Decision, JobView, Snapshot
from corral.core.policy import Policy, Promises, Reads, register_policy
from corral.policies.gpu_types import model_type, nodes_for
from corral.policies.placement import consolidated, fits, take

__all__ = ["GavelParams", "Gavel", "GavelFtf", "gang_gpus", "max_min_allocation",
           "finish_time_fair_allocation", "equal_share_throughput", "throughput_table",
           "place_on_type"]

#: Weight of the total normalised throughput beside the minimum (breaks ties between optima).
TIE_BREAK = 1e-6
#: A priority where a job has not run on a type yet: X scaled this much above any ratio.
UNSEEN = 1e9


@dataclass
class GavelParams:
    round_s: float = 360.0  # Gavel's round (§5, 6 minutes)

    def __post_init__(self) -> None:
        if not self.round_s > 0:
            raise ValueError(f"round_s must be > 0, got {self.round_s}")


def gang_gpus(cluster: Cluster, view: JobView) -> int:
    """The GPUs job `view` runs on: its request, at most the GPUs of the largest type it may
    use (its `gpu_type`, else any)."""
    most = max((cluster.gpus_of_type(t) for t in cluster.types_for(view.spec)), default=0)
    return max(1, min(view.spec.gpus, most))


def throughput_table(cluster: Cluster, views: list[JobView] | tuple[JobView, ...]
                     ) -> np.ndarray:
    """(jobs, types) samples/s of each job at its requested GPUs and user batch on each of the
    cluster's types (`cluster.gpu_types` order); 0 where the type cannot hold it or the job's
    `gpu_type` excludes it; 1.0 on every allowed type for a job with no model."""
    types = cluster.gpu_types
    out = np.zeros((len(views), len(types)))
    sizes = [cluster.max_node_gpus_of_type(t) for t in types]
    for j, view in enumerate(views):
        spec = view.spec
        g = gang_gpus(cluster, view)
        allowed = cluster.types_for(spec)
        for i, t in enumerate(types):
            if g > cluster.gpus_of_type(t) or t not in allowed:
                continue
            src = model_type(view, t)
            if src is None:
                out[j, i] = 1.0
                continue
            fn = view.estimator.goodput_fn(src)  # type: ignore[union-attr]
            assert fn is not None  # `src` has a model
            batch = spec.user_batch(g)
            speed = float(fn.throughput(nodes_for(g, sizes[i]), g, batch.local_bsz,
                                        batch.accum_steps))
            out[j, i] = speed if math.isfinite(speed) and speed > 0 else 0.0
    return out


def max_min_allocation(tput: np.ndarray, gpus: np.ndarray, capacity: np.ndarray
                       ) -> tuple[np.ndarray, float]:
    """Gavel's LAS program (§4.1), an LP solved with HiGHS. X[j][t] is the time fraction job j runs
    on type t at s_j = `gpus[j]` GPUs; tput_eq(j) = sum_t tput(j,t) c_t / sum_t c_t. Maximise
    min_j s_j sum_t X[j][t] tput(j,t) / tput_eq(j) s.t. sum_t X[j][t] <= 1, sum_j s_j X[j][t] <=
    c_t, X[j][t] = 0 where tput(j,t) = 0. The factor s_j makes it LAS over GPU time; per-user
    weights are all 1; ties go to more total normalised throughput (a 1e-6 weight on its sum).
    `tput` is samples/s on s_j GPUs of t packed on fewest nodes (0: not allowed: s_j > c_t or
    excluded by the job's `gpu_type`), `capacity` c_t. Returns X (jobs, types) and the optimal
    min."""
    num_jobs, num_types = tput.shape
    if num_jobs == 0 or num_types == 0:
        return np.zeros((num_jobs, num_types)), 0.0
    allowed = tput > 0
    share = np.where(allowed, capacity[None, :], 0.0)
    weight = share.sum(axis=1)
    norm = np.divide((tput * share).sum(axis=1), weight, out=np.zeros(num_jobs),
                     where=weight > 0)
    coef = np.divide(gpus[:, None] * tput, norm[:, None], out=np.zeros_like(tput),
                     where=norm[:, None] > 0)
    live = np.flatnonzero(coef.max(axis=1) > 0)
    n = num_jobs * num_types
    c = np.zeros(n + 1)
    c[:n] = -TIE_BREAK * coef.ravel()
    c[n] = -1.0
    rows, rhs = [], []
    for j in live.tolist():  # z <= sum_t coef[j, t] X[j, t]
        row = np.zeros(n + 1)
        row[j * num_types:(j + 1) * num_types] = -coef[j]
        row[n] = 1.0
        rows.append(row)
        rhs.append(0.0)
    for j in range(num_jobs):  # sum_t X[j, t] <= 1
        row = np.zeros(n + 1)
        row[j * num_types:(j + 1) * num_types] = 1.0
        rows.append(row)
        rhs.append(1.0)
    for t in range(num_types):  # sum_j s_j X[j, t] <= c_t
        row = np.zeros(n + 1)
        row[t:n:num_types] = gpus
        rows.append(row)
        rhs.append(float(capacity[t]))
    bounds = [(0.0, 1.0 if ok else 0.0) for ok in allowed.ravel()] + [(0.0, None)]
    res = linprog(c, A_ub=np.array(rows), b_ub=np.array(rhs), bounds=bounds, method="highs")
    if res.status != 0:  # the program is always feasible (X = 0); a solver failure runs none
        return np.zeros((num_jobs, num_types)), 0.0
    x = np.clip(np.round(res.x[:n].reshape(num_jobs, num_types), 9), 0.0, 1.0)
    return x, float(res.x[n]) if len(live) else 0.0


@register_policy
class Gavel(Policy):
    name = "gavel"
    summary = ("Gavel: heterogeneity-aware max-min fairness (LAS) over per-type throughputs, "
               "an LP realised in 360 s rounds at the user's GPU count")
    Params = GavelParams
    #: Full views (the per-type models); whole gangs on one type, chosen here.
    promises = Promises(reads=Reads.VIEWS | Reads.GPU_TYPES)

    def __init__(self, params: GavelParams | None = None) -> None:
        super().__init__(params)
        self._jobs: frozenset[str] = frozenset()
        #: The cluster the allocation and the kept assignments are for: a queue's share (the
        #: tenancy layer's sub-cluster) may change shape from one call to the next.
        self._cluster: Cluster | None = None
        self._x: dict[str, dict[str, float]] = {}
        self._since_s = 0.0  # when X was last computed: fractions count from then
        self._on: dict[str, dict[str, float]] = {}  # seconds given on each type since then
        self._given: dict[str, tuple[str, Assignment]] = {}  # the last decision, with types
        self._last_s: float | None = None
        self._round: int | None = None
        self._until = -math.inf
        #: The last program's optimal min (for tests and benchmarks).
        self.last_objective = 0.0

    def stands_until(self) -> float:
        return self._until

    def job_left(self, name: str) -> None:
        self._x.pop(name, None)
        self._on.pop(name, None)
        self._given.pop(name, None)

    def decide(self, snapshot: Snapshot) -> Decision:
        now, cluster, views = snapshot.time_s, snapshot.cluster, snapshot.jobs
        names = frozenset(v.name for v in views)
        if self._last_s is not None:  # the time since the last call, on the type given
            dt = now - self._last_s
            for name, (t, _) in self._given.items():
                if name in names:
                    on = self._on.setdefault(name, {})
                    on[t] = on.get(t, 0.0) + dt
        self._last_s = now
        reshaped = cluster != self._cluster
        if names != self._jobs or reshaped:
            self._jobs, self._cluster = names, cluster
            self._allocate(cluster, views, now)
            self._since_s, self._on = now, {}
        k = math.floor(now / self.params.round_s + 1e-9)
        if k != self._round or reshaped:
            self._round, keep = k, {}
        else:
            keep = {n: g for n, g in self._given.items() if n in names}
        self._given = self._assign(snapshot, keep)
        self._until = (k + 1) * self.params.round_s
        return Decision({n: a for n, (_, a) in self._given.items()})

    # -- the program ---------------------------------------------------------------------------
    def _allocate(self, cluster: Cluster, views: tuple[JobView, ...], now: float) -> None:
        types = cluster.gpu_types
        tput = throughput_table(cluster, views)
        gpus = np.array([gang_gpus(cluster, v) for v in views], dtype=float)
        capacity = np.array([cluster.gpus_of_type(t) for t in types], dtype=float)
        x, self.last_objective = self._program(views, now, tput, gpus, capacity)
        self._x = {v.name: {t: float(x[j, i]) for i, t in enumerate(types)}
                   for j, v in enumerate(views)}

    def _program(self, views: tuple[JobView, ...], now: float, tput: np.ndarray,
                 gpus: np.ndarray, capacity: np.ndarray) -> tuple[np.ndarray, float]:
        return max_min_allocation(tput, gpus, capacity)

    def allocation(self) -> dict[str, dict[str, float]]:
        """The current X: {job: {type: fraction of time}}."""
        return {n: dict(row) for n, row in self._x.items()}

    # -- the mechanism -------------------------------------------------------------------------
    def _priority(self, name: str, t: str, now: float) -> float:
        x = self._x.get(name, {}).get(t, 0.0)
        elapsed = now - self._since_s
        got = self._on.get(name, {}).get(t, 0.0)
        if elapsed <= 0 or got <= 0:
            return x * UNSEEN
        return x / (got / elapsed)

    def _assign(self, snapshot: Snapshot, keep: dict[str, tuple[str, Assignment]]
                ) -> dict[str, tuple[str, Assignment]]:
        """Keep `keep`, then take (job, type) pairs in priority order (§5), each job once, while the
        type has s_j GPUs left, packed on as few nodes as possible (`consolidated`). Priority is
        X[j][t] over the fraction of the time since X was computed that j ran on t (`_priority`;
        never ran there: infinite, by X); ties go by submission time, name, then the cluster's
        type order. A job kept on its type at its size keeps its GPUs. Between round boundaries
        the assignments stand (`stands_until`); arrivals and departures only let waiting jobs
        take idle GPUs."""
        cluster, now = snapshot.cluster, snapshot.time_s
        types = cluster.gpu_types
        free = list(cluster.gpus_per_node)
        out: dict[str, tuple[str, Assignment]] = {}
        for name, (t, a) in keep.items():
            take(free, a.placement)
            out[name] = (t, a)
        room = {t: sum(free[n] for n in cluster.nodes_of_type(t)) for t in types}
        pairs = []
        for view in snapshot.jobs:
            if view.name in out:
                continue
            spec = view.spec
            g = gang_gpus(cluster, view)
            allowed = cluster.types_for(spec)
            for rank, t in enumerate(types):
                if g > cluster.gpus_of_type(t) or t not in allowed:
                    continue
                prio = round(self._priority(view.name, t, now), 6)
                pairs.append(((-prio, spec.submit_time_s, view.name, rank), view, t, g))
        pairs.sort(key=lambda p: p[0])
        chosen: list[tuple[JobView, str, int]] = []
        taken: set[str] = set()
        for _, view, t, g in pairs:
            if view.name in taken or g > room[t]:
                continue
            taken.add(view.name)
            room[t] -= g
            chosen.append((view, t, g))
        movers = []
        for view, t, g in chosen:  # a job staying on its type at its size keeps its GPUs
            cur = view.placement
            if (cur.slots and cur.num_gpus == g and cluster.placement_type(cur) == t
                    and fits(free, cur)):
                take(free, cur)
                out[view.name] = (t, view.assignment)  # type: ignore[assignment]
            else:
                movers.append((view, t, g))
        for view, t, g in movers:
            placement = place_on_type(cluster, free, t, g)
            if placement is not None:
                take(free, placement)
                out[view.name] = (t, Assignment.user_config(view.spec, placement))
        return out


def equal_share_throughput(tput: np.ndarray, gpus: np.ndarray, capacity: np.ndarray
                           ) -> np.ndarray:
    """Each job's throughput on an equal share of the cluster (`gavel-ftf`'s reference, the
    heterogeneity-unaware fair share): total GPUs / jobs of them, spread over the types it may
    use in proportion to their GPUs, at most all the time."""
    num_jobs = tput.shape[0]
    share = np.where(tput > 0, capacity[None, :], 0.0)
    weight = share.sum(axis=1)
    norm = np.divide((tput * share).sum(axis=1), weight, out=np.zeros(num_jobs),
                     where=weight > 0)
    fraction = np.minimum(1.0, float(capacity.sum()) / max(num_jobs, 1) / gpus)
    return norm * fraction


def finish_time_fair_allocation(tput: np.ndarray, gpus: np.ndarray, capacity: np.ndarray,
                                remaining: np.ndarray, elapsed_s: np.ndarray,
                                iterations: int = 40) -> tuple[np.ndarray, float]:
    """Gavel's finish-time fairness (§4.2, after Themis): X minimising max_j rho_j, with
    rho_j = (t_j + R_j / tput_j(X)) / (t_j + R_j / tput_eq_j), t_j the time since the job
    arrived, R_j its remaining samples, tput_eq_j its equal-share throughput. rho is not linear
    in X; for a given bound z every job needs tput_j(X) >= R_j / (z D_j - t_j), an LP
    feasibility problem, so z is bisected (`iterations` LPs). Returns X and max_j rho_j."""
    num_jobs, num_types = tput.shape
    empty = np.zeros((num_jobs, num_types))
    eq = equal_share_throughput(tput, gpus, capacity)
    live = (eq > 0) & (remaining > 0)
    if not live.any():
        return empty, 0.0
    denom = np.where(live, elapsed_s + remaining / np.where(eq > 0, eq, 1.0), 1.0)
    fastest = tput.max(axis=1)
    low = float(np.max(np.where(live, (elapsed_s + remaining / np.where(fastest > 0, fastest,
                                                                       1.0)) / denom, 0.0)))
    n = num_jobs * num_types
    rows, rhs = [], []
    for j in range(num_jobs):  # sum_t X[j, t] <= 1
        row = np.zeros(n)
        row[j * num_types:(j + 1) * num_types] = 1.0
        rows.append(row)
        rhs.append(1.0)
    for t in range(num_types):  # sum_j s_j X[j, t] <= c_t
        row = np.zeros(n)
        row[t:n:num_types] = gpus
        rows.append(row)
        rhs.append(float(capacity[t]))
    bounds = [(0.0, 1.0 if ok else 0.0) for ok in (tput > 0).ravel()]
    need_rows = np.zeros((num_jobs, n))
    for j in range(num_jobs):
        need_rows[j, j * num_types:(j + 1) * num_types] = -tput[j]

    def feasible(z: float) -> np.ndarray | None:
        slack = z * denom - elapsed_s
        if np.any(live & (slack <= 0)):
            return None
        need = np.where(live, remaining / np.where(slack > 0, slack, 1.0), 0.0)
        res = linprog(-TIE_BREAK * np.abs(need_rows).sum(axis=0),
                      A_ub=np.vstack([np.array(rows), need_rows[live]]),
                      b_ub=np.concatenate([rhs, -need[live]]), bounds=bounds, method="highs")
        return res.x if res.status == 0 else None

    high = max(1.0, low) * 2.0
    best = feasible(high)
    while best is None and high < 1e6:
        high *= 4.0
        best = feasible(high)
    if best is None:
        return empty, math.inf
    low = max(low, 0.0)
    for _ in range(iterations):
        mid = (low + high) / 2.0
        x = feasible(mid)
        if x is None:
            low = mid
        else:
            high, best = mid, x
    x = np.clip(np.round(best.reshape(num_jobs, num_types), 9), 0.0, 1.0)
    return x, high


@register_policy
class GavelFtf(Gavel):
    name = "gavel-ftf"
    summary = ("Gavel's finish-time fairness (Themis's rho) over per-type throughputs, bisected "
               "LPs on the true remaining work, the same 360 s rounds")
    #: Remaining work from `JobView.oracle` (Gavel's jobs declare their total steps; here only
    #: the simulator knows it): an oracle policy.
    promises = Promises(reads=Reads.VIEWS | Reads.ORACLE | Reads.GPU_TYPES)

    def _program(self, views: tuple[JobView, ...], now: float, tput: np.ndarray,
                 gpus: np.ndarray, capacity: np.ndarray) -> tuple[np.ndarray, float]:
        remaining = np.array([v.oracle.remaining_steps_user * v.spec.batch_size
                              if v.oracle is not None else 0.0 for v in views])
        elapsed = np.array([max(0.0, now - v.spec.submit_time_s) for v in views])
        return finish_time_fair_allocation(tput, gpus, capacity, remaining, elapsed)

def place_on_type(cluster: Cluster, free: list[int], gpu_type: str, gpus: int
                  ) -> Placement | None:
    """`gpus` GPUs on nodes of `gpu_type` only, on as few nodes as possible (`consolidated`
    over that type's free GPUs), or None when they do not fit."""
    nodes = cluster.nodes_of_type(gpu_type)
    packed = consolidated([free[n] for n in nodes], gpus)
    if packed is None:
        return None
    return Placement(tuple((nodes[i], g) for i, g in packed.slots))
