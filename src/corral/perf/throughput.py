"""Pollux throughput model: seconds per iteration as a function of (N nodes, K GPUs, m, s).

Batch choice, speedups and the allocation search need step times of configurations a job has
not run; this module predicts them (Pollux (OSDI'21) §3.2, Eq. 8-11) and fits the seven
parameters (Eq. 12, §4.1) to measured step times: RMSLE + L-BFGS-B, with prior-driven
exploration pinning unobserved regimes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from corral.perf.lbfgsb import minimize_lbfgsb
from corral.perf.numpy_order import numpy_sum

__all__ = [
    "ThroughputParams", "grad_time", "sync_time", "iteration_time", "fit_throughput",
    "PARAM_LOWER_BOUND", "GAMMA_BOUNDS", "DISTINCT_NODE_COUNTS",
]

#: Lower bound of every alpha/beta parameter; a pinned ("assumed free") sync cost sits here.
PARAM_LOWER_BOUND = 1e-8
#: Allowed range of the compute/communication overlap exponent gamma (Pollux Sec. 4.1).
GAMMA_BOUNDS = (1.0, 10.0)
# Initial point (Pollux artifact's `fit_perf_params`): alpha 0.1 s, beta 0.01 s, gamma 1.001.
_INITIAL = (0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.001)
# Regulariser weights (Pollux artifact): pull gamma toward 1 and keep beta/alpha small for sync.
_GAMMA_REG = 1e-3
_RATIO_REG = 1e-2
_RMSE_FLOOR = 1e-12  # keeps the sqrt differentiable at a perfect fit
# scipy's default ftol stops L-BFGS-B early on this objective (the RMSEs have a kink at a
# perfect fit, so steps shrink while the loss is still above its minimum); tighten it.
_LBFGSB_OPTIONS: dict[str, Any] = {"ftol": 1e-12, "gtol": 1e-9, "maxiter": 500}
# The fit runs over log(alpha), log(beta): bounds in that space. The upper one is "unbounded"
# for any real job (1e9 s) but keeps exp() finite during line searches.
_LOG_LOWER = float(np.log(PARAM_LOWER_BOUND))
_LOG_UPPER = float(np.log(1e9))

# Fits remembered by their exact inputs (`_fit_memo`); an entry is a few hundred bytes.
_FIT_MEMO_SIZE = 4096

# A warm-start value at or below this was pinned (or driven to the bound): start it afresh,
# since in log space a parameter sitting at the bound has almost no gradient.
_WARM_MIN = 1e3 * PARAM_LOWER_BOUND

# Positions in ThroughputParams.as_array().
_AG, _BG, _AL, _BL, _AN, _BN, _GAMMA = range(7)


@dataclass(frozen=True, slots=True)
class ThroughputParams:
    """theta_sys of Pollux Eq. 12 (times in seconds, betas per sample or per extra GPU)."""

    alpha_grad: float  # constant compute time per micro-step
    beta_grad: float  # compute time per sample of the per-GPU batch
    alpha_local: float  # sync time, all replicas on one node
    beta_local: float  # extra sync time per GPU beyond 2, one node
    alpha_node: float  # sync time, replicas on >= 2 nodes
    beta_node: float  # extra sync time per GPU beyond 2, >= 2 nodes
    gamma: float  # overlap exponent, 1 = no overlap, large = full overlap

    def as_array(self) -> np.ndarray:
        return np.array([getattr(self, f.name) for f in dataclasses.fields(self)], dtype=float)

    @classmethod
    def from_array(cls, a: ArrayLike) -> ThroughputParams:
        arr = np.asarray(a, dtype=float).ravel()
        if arr.shape != (7,):
            raise ValueError(f"ThroughputParams needs 7 values, got {arr.shape[0]}")
        return cls(*(float(v) for v in arr))

    def to_dict(self) -> dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ThroughputParams:
        return cls(**{f.name: float(d[f.name]) for f in dataclasses.fields(cls)})


#: The model tells node counts apart only as 0, 1 and "several" (Eq. 9: one node syncs
#: locally, two or more over the network): every prediction for N >= 2 nodes equals the one
#: for 2, so `min(N, DISTINCT_NODE_COUNTS - 1)` computes it exactly.
DISTINCT_NODE_COUNTS = 3


def _scalar_or_array(x: np.ndarray) -> Any:
    """0-d results come back as numpy scalars (usable as floats), others as arrays."""
    return x[()] if isinstance(x, np.ndarray) and x.ndim == 0 else x


def _sync_regime(num_nodes: ArrayLike, num_gpus: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masks of the two sync branches of Eq. 9 and the retrogression count max(K-2, 0).

    The Pollux artifact clamps (K-2) at a tiny positive value; the clamp only matters for
    K < 2, where Eq. 9 is 0 anyway, so clamping at 0 gives the same model. The node count
    enters only here, as N <= 1 or N > 1 (`DISTINCT_NODE_COUNTS`).
    """
    nodes = np.asarray(num_nodes)
    gpus = np.asarray(num_gpus)
    multi = gpus >= 2
    local = multi & (nodes <= 1)
    node = multi & (nodes > 1)
    extra = np.maximum(gpus - 2, 0).astype(float)
    return local, node, extra


def grad_time(params: ThroughputParams, local_bsz: ArrayLike) -> Any:
    """Eq. 8: compute time of one forward/backward pass of `local_bsz` samples per GPU."""
    m = np.asarray(local_bsz, dtype=float)
    return _scalar_or_array(params.alpha_grad + params.beta_grad * m)


def sync_time(params: ThroughputParams, num_nodes: ArrayLike, num_gpus: ArrayLike) -> Any:
    """Eq. 9: gradient all-reduce time; 0 on one GPU, local params on one node, node params else."""
    local, node, extra = _sync_regime(num_nodes, num_gpus)
    t = (np.where(local, params.alpha_local + params.beta_local * extra, 0.0)
         + np.where(node, params.alpha_node + params.beta_node * extra, 0.0))
    return _scalar_or_array(t)


def _overlap(t_grad: np.ndarray, t_sync: np.ndarray, gamma: float) -> np.ndarray:
    """(t_grad^g + t_sync^g)^(1/g), computed as hi*(1+(lo/hi)^g)^(1/g) so large g cannot underflow."""
    hi = np.maximum(t_grad, t_sync)
    lo = np.minimum(t_grad, t_sync)
    safe_hi = np.where(hi > 0, hi, 1.0)
    return np.where(hi > 0, safe_hi * (1.0 + (lo / safe_hi) ** gamma) ** (1.0 / gamma), 0.0)


def iteration_time(params: ThroughputParams, num_nodes: ArrayLike, num_gpus: ArrayLike,
                   local_bsz: ArrayLike, accum_steps: ArrayLike = 0) -> Any:
    """Eq. 10-11: seconds per optimizer step with `accum_steps` extra accumulation micro-steps."""
    t_grad = np.asarray(grad_time(params, local_bsz), dtype=float)
    t_sync = np.asarray(sync_time(params, num_nodes, num_gpus), dtype=float)
    s = np.asarray(accum_steps, dtype=float)
    return _scalar_or_array(s * t_grad + _overlap(t_grad, t_sync, params.gamma))


# ----------------------------------------------------------------------------------- fitting


@dataclass(frozen=True, slots=True)
class _Profile:
    """One point per unique (N, K, m): averaged step and compute (grad) times, and the sync
    regime of each point (Eq. 9), computed once per fit rather than at every evaluation. The
    objective reads the per-point columns as Python floats (`points`)."""

    nodes: np.ndarray
    gpus: np.ndarray
    local_bsz: np.ndarray
    grad_mean_s: float
    points: list[_Point]


#: What the objective reads of one point, as Python floats and bools: (m, max(K - 2, 0),
#: one-node sync, several-node sync, log mean step time, log mean compute time).
_Point = tuple[float, float, bool, bool, float, float]


def _aggregate(nodes: np.ndarray, gpus: np.ndarray, bsz: np.ndarray, step: np.ndarray,
               sync: np.ndarray) -> _Profile:
    """Check the flat float input columns and average them per unique (N, K, m)."""
    n = nodes.size
    if n == 0:
        raise ValueError("fit_throughput needs at least one observation")
    if any(c.size != n for c in (gpus, bsz, step, sync)):
        raise ValueError("fit_throughput: all input columns must have the same length")
    if not (np.all(np.isfinite(step)) and np.all(step > 0)):
        raise ValueError("fit_throughput: step times must be finite and > 0")
    if np.any(gpus < 1) or np.any(nodes < 1) or np.any(bsz < 1):
        raise ValueError("fit_throughput: nodes, GPUs and local batch sizes must be >= 1")
    keys, inverse = np.unique(np.stack([nodes, gpus, bsz], axis=1), axis=0, return_inverse=True)
    inverse = inverse.ravel()
    counts = np.bincount(inverse)
    step_mean = np.bincount(inverse, weights=step) / counts
    sync_mean = np.bincount(inverse, weights=np.clip(sync, 0.0, None)) / counts
    # Compute time = step - sync; a sync reading at or above the step time is noise, so keep
    # at least a sliver of the step as compute rather than taking the log of <= 0.
    grad_mean = np.maximum(step_mean - sync_mean, 1e-3 * step_mean)
    nodes, gpus = keys[:, 0], keys[:, 1]
    local, node, extra = _sync_regime(nodes, gpus)
    points = list(zip(keys[:, 2].tolist(), extra.tolist(), local.tolist(), node.tolist(),
                      np.log(step_mean).tolist(), np.log(grad_mean).tolist()))
    return _Profile(nodes, gpus, keys[:, 2], float(np.mean(grad_mean)), points)


def _loss_and_grad(theta: list[float], rows: list[_Point]) -> tuple[float, list[float]]:
    """Pollux §4.1 objective: RMSLE(T_grad) + RMSLE(T_iter) + regularisers, and its gradient.

    Called hundreds of times per fit on a handful of points, so it runs on Python floats, with the
    array formulas' operations (in the comments) in the same order: sums follow numpy's pairwise
    order (`numpy_sum`), logs and exps are numpy's. Results match the array form to the last bit
    (tests/perf/test_throughput_objective.py).
    """
    ag, bg, al, bl, an, bn, gamma = theta
    n = len(rows)
    gm1 = gamma - 1.0
    # t_grad = ag + bg*m; t_sync = where(local, al + bl*extra, 0) + where(node, an + bn*extra, 0)
    t_grad = [ag + bg * r[0] for r in rows]
    sync_arg = [(al + bl * e if lo else 0.0) + (an + bn * e if no else 0.0) if lo or no else 1.0
                for _, e, lo, no, _, _ in rows]
    logs = np.log(t_grad + sync_arg).tolist()  # log t_grad, log where(synced, t_sync, 1)
    # log T_iter = logaddexp(g*log tg, g*log ts)/g; on one GPU T_iter = T_grad.
    g_tg = [gamma * v for v in logs[:n]]
    g_ts = [gamma * v for v in logs[n:]]
    both = np.logaddexp(g_tg, g_ts).tolist()
    lse = [b if lo or no else a for a, b, (_, _, lo, no, _, _) in zip(g_tg, both, rows)]
    # d log T_iter / d T_grad = tg^(g-1)/(tg^g+ts^g), likewise for ts (0 on one GPU);
    # w_s = exp(g log ts - lse): three exponentials per point, interleaved in one call
    args: list[float] = []
    for ltg, lts, gts, v in zip(logs, logs[n:], g_ts, lse):
        args += (gm1 * ltg - v, gm1 * lts - v, gts - v)
    exps = np.exp(args).tolist()

    e_grad: list[float] = []
    e_iter: list[float] = []
    sq_grad: list[float] = []
    sq_iter: list[float] = []
    d_gamma: list[float] = []
    for i, (ltg, lts, v, row) in enumerate(zip(logs, logs[n:], lse, rows)):
        synced = row[2] or row[3]
        w = exps[3 * i + 2] if synced else 0.0
        lti = v / gamma
        d_gamma.append(((1.0 - w) * ltg + w * lts - lti) / gamma)
        eg, ei = ltg - row[5], lti - row[4]
        e_grad.append(eg)
        e_iter.append(ei)
        sq_grad.append(eg * eg)
        sq_iter.append(ei * ei)
    r_grad = math.sqrt(numpy_sum(sq_grad) / n + _RMSE_FLOOR)
    r_iter = math.sqrt(numpy_sum(sq_iter) / n + _RMSE_FLOOR)
    ratio_n, ratio_l = bn / an, bl / al
    loss = (r_grad + r_iter + _GAMMA_REG * gm1 ** 2
            + _RATIO_REG * (ratio_n ** 2 + ratio_l ** 2))

    # c = e / (n r): d r / d log t per point; g_tg = c_grad/t_grad + c_iter*d_tg (d loss /
    # d T_grad); g_s = c_iter*d_ts, times the 0/1 masks of each sync branch
    n_r_grad, n_r_iter = n * r_grad, n * r_iter
    g_t: list[float] = []
    g_tm: list[float] = []
    g_l: list[float] = []
    g_le: list[float] = []
    g_n: list[float] = []
    g_ne: list[float] = []
    g_g: list[float] = []
    for i, (eg, ei, tg, dg, (m, e, lo, no, _, _)) in enumerate(zip(e_grad, e_iter, t_grad,
                                                                    d_gamma, rows)):
        c_iter = ei / n_r_iter
        g = eg / n_r_grad * (1.0 / tg) + c_iter * exps[3 * i]
        g_s = c_iter * exps[3 * i + 1] if lo or no else c_iter * 0.0
        g_ls, g_ns = g_s * (1.0 if lo else 0.0), g_s * (1.0 if no else 0.0)
        g_t.append(g)
        g_tm.append(g * m)
        g_l.append(g_ls)
        g_le.append(g_ls * e)
        g_n.append(g_ns)
        g_ne.append(g_ns * e)
        g_g.append(c_iter * dg)
    grad = [
        numpy_sum(g_t),
        numpy_sum(g_tm),
        numpy_sum(g_l) - 2.0 * _RATIO_REG * ratio_l ** 2 / al,
        numpy_sum(g_le) + 2.0 * _RATIO_REG * ratio_l / al,
        numpy_sum(g_n) - 2.0 * _RATIO_REG * ratio_n ** 2 / an,
        numpy_sum(g_ne) + 2.0 * _RATIO_REG * ratio_n / an,
        numpy_sum(g_g) + 2.0 * _GAMMA_REG * gm1,
    ]
    return loss, grad


def fit_throughput(num_nodes: ArrayLike, num_gpus: ArrayLike, local_bsz: ArrayLike,
                   step_time_s: ArrayLike, sync_time_s: ArrayLike, *,
                   prior_driven: bool = True,
                   initial: ThroughputParams | None = None) -> ThroughputParams:
    """Fit theta_sys to measured steps (one row per measurement; duplicates are averaged).

    `step_time_s` is an optimizer step without accumulation, `sync_time_s` its synchronisation
    part. With `prior_driven`, regimes never observed are pinned to perfect scaling (Pollux §4.1);
    without it all seven are fitted. `initial` warm-starts the fit (parameters at the lower bound
    start from the defaults). Results are memoised by their inputs' bytes (`_fit_memo`), so jobs
    with identical profiles share a fit.
    """
    cols = (np.asarray(c, dtype=float).ravel()
            for c in (num_nodes, num_gpus, local_bsz, step_time_s, sync_time_s))
    warm = None if initial is None else initial.as_array().tobytes()
    return _fit_memo(tuple(c.tobytes() for c in cols), bool(prior_driven), warm)


@functools.lru_cache(maxsize=_FIT_MEMO_SIZE)
def _fit_memo(cols: tuple[bytes, ...], prior_driven: bool, initial: bytes | None
              ) -> ThroughputParams:
    """`_fit` of the float64 bytes of the five input columns and of the warm start.

    Keyed on bytes, not values, so a hit is exactly the same computation (-0.0 and 0.0, or
    two NaNs, are different keys); the result is immutable, so callers may share it. Inputs
    are checked on a miss only: invalid ones raise, so they are never remembered.
    """
    warm = None if initial is None else ThroughputParams.from_array(np.frombuffer(initial))
    return _fit(_aggregate(*(np.frombuffer(b) for b in cols)), prior_driven, warm)


def _fit(prof: _Profile, prior_driven: bool, initial: ThroughputParams | None
         ) -> ThroughputParams:
    """`fit_throughput` of an aggregated profile."""
    theta = np.array(_INITIAL, dtype=float)
    if initial is not None:
        warm = initial.as_array()
        usable = np.isfinite(warm) & (warm > _WARM_MIN)
        usable[_GAMMA] = GAMMA_BOUNDS[0] <= warm[_GAMMA] <= GAMMA_BOUNDS[1]
        theta[usable] = warm[usable]
    free = np.ones(7, dtype=bool)
    if prior_driven:
        pinned: list[int] = []
        if not np.any(prof.nodes > 1):
            pinned += [_AN, _BN]
        if not np.any((prof.nodes == 1) & (prof.gpus > 1)):
            pinned += [_AL, _BL]
        if not np.any(prof.gpus > 2):
            pinned += [_BL, _BN]
        theta[pinned] = PARAM_LOWER_BOUND
        free[pinned] = False
        if np.unique(prof.local_bsz).size == 1:
            # One batch size cannot separate the constant from the per-sample cost: assume
            # an even split (as the Pollux artifact).
            theta[_AG] = prof.grad_mean_s / 2.0
            free[_AG] = False

    # L-BFGS-B over log(alpha), log(beta) and gamma: the same bounded problem (alpha, beta >=
    # 1e-8, gamma in [1, 10]) but far better conditioned, since the parameters span orders of
    # magnitude (seconds vs seconds per sample); it then reaches the same optimum from the
    # artifact's starting point as from others, in fewer iterations.
    free_idx = np.flatnonzero(free)
    is_log = free_idx < _GAMMA

    free_list, log_list, base = free_idx.tolist(), is_log.tolist(), theta.tolist()
    points = prof.points

    def objective(q: np.ndarray) -> tuple[float, np.ndarray]:
        # as np.where(is_log, exp(q), q) into theta, and back through the chain rule
        xs = [e if lg else v for e, v, lg in zip(np.exp(q).tolist(), q.tolist(), log_list)]
        full = base.copy()
        for i, x in zip(free_list, xs):
            full[i] = x
        loss, grad = _loss_and_grad(full, points)
        return loss, np.array([grad[i] * x if lg else grad[i]
                               for i, x, lg in zip(free_list, xs, log_list)])

    x0 = theta[free_idx]
    if free_idx.size:
        lower = np.where(is_log, _LOG_LOWER, GAMMA_BOUNDS[0])
        upper = np.where(is_log, _LOG_UPPER, GAMMA_BOUNDS[1])
        x = minimize_lbfgsb(objective, np.where(is_log, np.log(x0), x0), lower, upper,
                            **_LBFGSB_OPTIONS)
        theta[free_idx] = np.where(is_log, np.maximum(np.exp(x), PARAM_LOWER_BOUND), x)
    if prior_driven and not np.any(prof.nodes > 1):
        # Never spread over nodes: assume cross-node sync is at least a bit slower than local.
        theta[_AN] = max(theta[_AN], 1.1 * theta[_AL])
        theta[_BN] = max(theta[_BN], 1.1 * theta[_BL])
    return ThroughputParams.from_array(theta)
