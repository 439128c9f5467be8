"""Sia's integer program: at most one (GPU type, nodes, GPUs) configuration per job.

Sia (SOSP'23) §3.3-3.4, as its artifact solves it, over normalised goodputs Ĝ[j][c] (j's
goodput on c over its smallest over its configurations), restart-scaled off the job's current
configuration (§3.4), with fairness power p, no-allocation penalty λ_n and change penalty λ_a.
`solve` states the program and solves it with HiGHS (`scipy.optimize.milp`); `objective`
evaluates the same sum for any choice, so the two can be compared (tests/policies/test_sia.py
enumerates every choice on small instances).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from corral.core.cluster import Cluster

__all__ = ["Config", "Program", "configurations", "solve", "objective", "MIN_GAIN"]

#: The smallest scaled goodput a cost is computed from (a restart factor of 0 would make
#: (r Ĝ)^p infinite for p < 0): the artifact's floor.
MIN_GAIN = 1e-4


@dataclass(frozen=True, slots=True)
class Config:
    """A configuration: `gpus` GPUs of `gpu_type` over `nodes` nodes."""

    gpu_type: str
    nodes: int
    gpus: int


def configurations(cluster: Cluster) -> list[Config]:
    """Sia's configurations of each type (cluster type order): 1, 2, 4, ... GPUs within one
    node (powers of two below the node size, then the node), then whole nodes, 2 up to all."""
    out = []
    for t in cluster.gpu_types:
        nodes = cluster.nodes_of_type(t)
        size = cluster.max_node_gpus_of_type(t)
        k = 1
        while k < size:
            out.append(Config(t, 1, k))
            k *= 2
        out.extend(Config(t, m, m * size) for m in range(1, len(nodes) + 1))
    return out


@dataclass
class Program:
    """One round's program: `goodput` (jobs, configs), 0 where a configuration is not allowed;
    `current[j]` the index of j's configuration now (None: none); `restart[j]` r_j; `keep[j]`:
    j must keep its current configuration (Sia's artifact keeps a job in checkpoint-restore)."""

    goodput: np.ndarray
    configs: Sequence[Config]
    capacity: dict[str, int]
    current: Sequence[int | None]
    restart: np.ndarray
    p: float = -0.5
    lambda_n: float = 1.1
    lambda_a: float = 0.01
    keep: Sequence[bool] = ()

    def kept(self, j: int) -> int | None:
        """The configuration job j must keep, or None when it may have any."""
        return self.current[j] if j < len(self.keep) and self.keep[j] else None

    def gains(self) -> np.ndarray:
        """(jobs, configs) r Ĝ: normalised goodputs, restart-scaled off the current config;
        NaN where not allowed."""
        g = np.where(self.goodput > 0, self.goodput, np.nan)
        with np.errstate(all="ignore"):
            low = np.nanmin(np.where(np.isnan(g), np.inf, g), axis=1, keepdims=True)
        norm = g / np.where(np.isfinite(low), low, 1.0)
        scale = np.ones_like(norm)
        for j, cur in enumerate(self.current):
            if cur is not None:
                scale[j, :] = self.restart[j]
                scale[j, cur] = 1.0
        return np.maximum(norm * scale, MIN_GAIN)

    def weights(self) -> tuple[np.ndarray, float]:
        """The linear objective (to minimise) over A, with its constant: (weights, constant);
        +inf where a configuration is not allowed."""
        sign = 1.0 if self.p < 0 else -1.0
        gains = self.gains()
        w = sign * np.power(gains, self.p) - self.lambda_n
        held = 0
        for j, cur in enumerate(self.current):
            if cur is not None:
                w[j, cur] -= self.lambda_a
                held += 1
            if self.kept(j) is not None:
                w[j, np.arange(w.shape[1]) != cur] = np.nan
        w = np.where(np.isnan(w), np.inf, w)
        return w, self.lambda_n * len(self.current) + self.lambda_a * held


def objective(program: Program, choice: Sequence[int | None]) -> float:
    """The objective (minimised form) of giving job j configuration `choice[j]` (None: none),
    summed from its definition; inf if the choice breaks a constraint or picks a forbidden
    configuration."""
    sign = 1.0 if program.p < 0 else -1.0
    gains = program.gains()
    used: dict[str, int] = {}
    total = 0.0
    for j, c in enumerate(choice):
        cur = program.current[j]
        if program.kept(j) is not None and c != cur:
            return float("inf")
        if c is None:
            total += program.lambda_n
        else:
            if not program.goodput[j, c] > 0:
                return float("inf")
            cfg = program.configs[c]
            used[cfg.gpu_type] = used.get(cfg.gpu_type, 0) + cfg.gpus
            total += sign * float(gains[j, c]) ** program.p
        if cur is not None and c != cur:
            total += program.lambda_a
    if any(n > program.capacity.get(t, 0) for t, n in used.items()):
        return float("inf")
    return total


def solve(program: Program, mip_rel_gap: float | None = None) -> tuple[list[int | None], float]:
    """The optimal choice (a configuration index or None per job) and its objective (the minimised
    form: negate for the maximised one when p > 0). With A[j][c] in {0, 1}, J jobs:
        p < 0:  minimise  sum_jc A[j][c] (r Ĝ[j][c])^p + λ_n (J - sum_jc A[j][c]) + λ_a C(A)
        p > 0:  maximise  sum_jc A[j][c] (r Ĝ[j][c])^p - λ_n (J - sum_jc A[j][c]) - λ_a C(A)
        s.t.    sum_c A[j][c] <= 1;  sum_{j, c on t} gpus(c) A[j][c] <= G_t  (each type's GPUs);
                A[j][current j] = 1 for a job that must keep it (`Program.keep`)
    C(A) counts jobs holding a configuration now that are given another (or none). With p < 0 an
    allocated job costs at most 1, so λ_n = 1.1 makes running a job better than not (if it fits).
    `mip_rel_gap`: stop within this relative gap of the optimum (None: HiGHS's default)."""
    num_jobs, num_configs = program.goodput.shape
    if num_jobs == 0:
        return [], 0.0
    w, const = program.weights()
    allowed = _undominated(program, w)
    cols = np.flatnonzero(allowed.ravel())  # variables: the (job, config) pairs worth a column
    if cols.size == 0:
        return [None] * num_jobs, const
    job_of, cfg_of = np.divmod(cols, num_configs)
    c = w.ravel()[cols]
    types = list(program.capacity)
    type_index = np.array([types.index(cfg.gpu_type) for cfg in program.configs])
    config_gpus = np.array([cfg.gpus for cfg in program.configs], dtype=float)
    every = np.arange(cols.size)
    one_each = sparse.csr_array((np.ones(cols.size), (job_of, every)), shape=(num_jobs, cols.size))
    per_type = sparse.csr_array((config_gpus[cfg_of], (type_index[cfg_of], every)),
                                shape=(len(types), cols.size))
    constraints = [LinearConstraint(one_each, -np.inf, 1.0),
                   LinearConstraint(per_type, -np.inf,
                                    np.array([program.capacity[t] for t in types], dtype=float))]
    # HiGHS's presolve finds nothing to remove in this one-of-each-job program and costs more
    # than the solve at scale (2,000 jobs on 2,048 GPUs: 0.13-0.36 s a round with it, 0.07-0.18 s
    # without, same optima; benchmarks/speed/bench_hetero.py (d)).
    low = np.array([1.0 if program.kept(int(j)) == int(k) else 0.0
                    for j, k in zip(job_of, cfg_of)])
    options: dict[str, object] = {"presolve": False}
    if mip_rel_gap is not None:
        options["mip_rel_gap"] = mip_rel_gap
    res = milp(c, constraints=constraints, integrality=np.ones(cols.size),
               bounds=Bounds(low, 1.0), options=options)
    choice: list[int | None] = [None] * num_jobs
    if res.status != 0 or res.x is None:  # always feasible (nothing allocated): solver trouble
        return choice, const
    for k in np.flatnonzero(res.x > 0.5):
        choice[int(job_of[k])] = int(cfg_of[k])
    return choice, float(c @ np.round(res.x)) + const


def _undominated(program: Program, w: np.ndarray) -> np.ndarray:
    """(jobs, configs) mask of the pairs the program needs a variable for: allowed (finite
    weight), and either the job's current configuration or cheaper than every configuration of
    the same type with fewer GPUs. A dominated pair (more GPUs of a type for no lower cost) is
    never needed at an optimum: the smaller one fits wherever it does and costs no more, so
    dropping it keeps the optimal objective and shrinks the program several-fold at scale."""
    keep = np.isfinite(w)
    configs = program.configs
    start = 0
    while start < len(configs):  # each type's configurations: a run, fewest GPUs first
        end = start
        while end < len(configs) and configs[end].gpu_type == configs[start].gpu_type:
            end += 1
        block = w[:, start:end]
        if not all(configs[k].gpus < configs[k + 1].gpus for k in range(start, end - 1)):
            start = end  # not sorted by GPUs: keep the block whole
            continue
        cheapest_before = np.minimum.accumulate(
            np.hstack([np.full((w.shape[0], 1), np.inf), block[:, :-1]]), axis=1)
        keep[:, start:end] &= block < cheapest_before
        start = end
    for j, cur in enumerate(program.current):
        if cur is not None and np.isfinite(w[j, cur]):
            keep[j, cur] = True
    return keep
