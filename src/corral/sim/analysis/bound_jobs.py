"""The LP bound of a workload: each job's work and best rate per GPU count, from the truth.

Epoch e's reference cost is its least GPU-seconds over GPU counts k at the best batch,
`ref_e = min_k k t_e(k)` (`corral.sim.truth.replay.best_epoch_secs`); the job's work is `W =
sum_e ref_e` and its rate on k GPUs at most `S(k) = max_e ref_e / t_e(k)`, taken as a concave
hull up to its GPU limit. Assumed, as `best_isolated_jct`: packed GPUs are fastest, and the
best batch is on a grid (`RATE_POINTS`). Time outside steps is left out (only lowers the
bound); `alone_s` is the isolated bound, so the LP is never below it. Several GPU types: a rate
bound per type against one work (`bound_job`), and a capacity per type; one type is the one case.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from corral.core.cluster import Cluster
from corral.core.jobs import JobSpec
from corral.sim.analysis.lp_bound import (
    DEFAULT_SLOTS,
    BoundJob,
    LpBound,
    TypeRate,
    hull_pieces,
    lp_lower_bound,
)
from corral.sim.analysis.window_bound import windowed_lower_bound
from corral.sim.truth.base import AppTruth, Truth
from corral.sim.truth.replay import best_epoch_secs, best_isolated_jct
from corral.sim.truth.scaled import ScaledApp, job_app, spec_epochs
from corral.sim.workloads import Workload

#: Largest workload whose bound is the exact LP (`lp_bound`: it grows with jobs x slots, 160
#: jobs take seconds); larger ones get the windowed relaxation (`window_bound`).
MAX_EXACT_JOBS = 600
#: Geometric steps of total batch size per GPU count when looking for a job's best rate.
RATE_POINTS = 48


def bound_job(spec: JobSpec, app: AppTruth, cluster: Cluster) -> BoundJob:
    """One job's release, work, rate bound per GPU type it may use, and alone-bound.

    On each type it may use (its `gpu_type`, else every type of the cluster; one type: the one
    case), its rate per GPU count on that type (`app.for_type`, up to that type's GPUs) against
    one work: epoch e's reference cost is its least GPU-seconds over types and counts, so a
    type's rate is `max_e ref_e / t_e,type(k)` (see the module docstring). A duration-scaled
    job (`ScaledApp`) is its application's bound scaled: every epoch's time is the factor times
    the application's, so work and alone-bound scale and the rates do not (thousands of trace
    jobs share a handful of applications).
    """
    epochs = spec_epochs(spec, app)
    fixed = None if spec.adaptive else spec.batch_size
    max_bsz = spec.max_bsz if spec.adaptive else spec.batch_size
    allowed = cluster.types_for(spec)  # (empty: the cluster lacks its gpu_type)
    args = (epochs, fixed, spec.max_local_bsz, spec.min_local_bsz, max_bsz, spec.max_gpus)
    if isinstance(app, ScaledApp):
        work, rates, alone = _job_rates(app.app, cluster, tuple(allowed), *args)
        work, alone = work * app.factor, alone * app.factor
    else:
        work, rates, alone = _job_rates(app, cluster, tuple(allowed), *args)
    if not rates:
        raise ValueError(f"job {spec.name}: the cluster has no GPU type it may run on")
    return BoundJob(release_s=spec.submit_time_s, work=work, rates=rates, alone_s=alone)


@lru_cache(maxsize=4096)
def _job_rates(app: AppTruth, cluster: Cluster, allowed: tuple[str, ...], epochs: int,
               fixed: int | None, max_local_bsz: int, min_local_bsz: int, max_bsz: int,
               max_gpus: int) -> tuple[float, tuple[TypeRate, ...], float]:
    """(work, rate bound per type, alone-bound) of a job of `app` (see `bound_job`)."""
    per_type = []
    for t in allowed:
        limit = max(1, min(cluster.gpus_of_type(t), max_gpus))
        app_t = app.for_type(t)
        args = (cluster.max_node_gpus_of_type(t), epochs, fixed, max_local_bsz, min_local_bsz,
                max_bsz)
        secs = np.array([np.minimum(best_epoch_secs(app_t, k, *args, points=RATE_POINTS),
                                    best_epoch_secs(app_t, k, *args)) for k in range(1, limit + 1)])
        alone = best_isolated_jct(app_t, cluster.gpus_of_type(t), *args)
        per_type.append((t, secs, alone))
    if not per_type:
        return 0.0, (), math.inf
    ref = np.min([np.min(np.arange(1, len(secs) + 1, dtype=float)[:, None] * secs, axis=0)
                  for _, secs, _ in per_type], axis=0)  # least GPU-seconds of each epoch
    rates: list[TypeRate] = []
    for t, secs, _ in per_type:
        with np.errstate(divide="ignore", invalid="ignore"):
            speed = np.where(np.isfinite(secs), ref[None, :] / secs, 0.0).max(axis=1)
        if not np.any(speed > 0):
            continue
        pieces, cap = hull_pieces(speed.tolist())
        rates.append((t, pieces, float(cap)))
    return float(ref.sum()), tuple(rates), min(alone for _, _, alone in per_type)


def workload_lp_bound(workload: Workload, truth: Truth, cluster: Cluster, *,
                      slots: int = DEFAULT_SLOTS, method: str = "auto") -> LpBound:
    """The LP lower bound on the average JCT of any schedule of `workload` on `cluster`, with
    a capacity per GPU type (one type: the one-type case). `method`: "exact" (`lp_bound`, with
    `slots`), "windowed" (`window_bound`, any length) or "auto" (exact up to `MAX_EXACT_JOBS`
    jobs, windowed above)."""
    if method not in ("auto", "exact", "windowed"):
        raise ValueError(f"unknown bound method {method!r}: auto, exact or windowed")
    jobs = bound_jobs(workload, truth, cluster)
    if method == "windowed" or (method == "auto" and len(jobs) > MAX_EXACT_JOBS):
        return windowed_lower_bound(jobs, cluster_gpus(cluster))
    return lp_lower_bound(jobs, cluster_gpus(cluster), slots=slots)


def bound_jobs(workload: Workload, truth: Truth, cluster: Cluster) -> list[BoundJob]:
    """Every job of `workload` as the bound sees it on `cluster` (`bound_job`)."""
    per_node = cluster.max_node_gpus
    return [bound_job(spec, job_app(truth, spec, per_node), cluster) for spec in workload.jobs]


def cluster_gpus(cluster: Cluster) -> dict[str, float]:
    """The cluster's GPUs per type, as the bound's capacity."""
    return {t: float(cluster.gpus_of_type(t)) for t in cluster.gpu_types}
