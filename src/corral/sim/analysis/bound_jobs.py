"""The LP bound of a workload: each job's work and best rate per GPU count, from the truth.

Epoch e's reference cost is its least GPU-seconds over GPU counts k at the best batch,
`ref_e = min_k k t_e(k)` (`corral.sim.truth.replay.best_epoch_secs`); the job's work is `W =
sum_e ref_e` and its rate on k GPUs at most `S(k) = max_e ref_e / t_e(k)`, taken as a concave
hull up to its GPU limit. Assumed, as `best_isolated_jct`: packed GPUs are fastest, and the
best batch is on a grid (`RATE_POINTS`). Time outside steps is left out (only lowers the
bound); `alone_s` is the isolated bound, so the LP is never below it. Several GPU types:
`typed_bound_job`, with a capacity per type (`lp_bound.lp_lower_bound_typed`).
"""

from __future__ import annotations

import numpy as np

from corral.core.cluster import Cluster
from corral.core.jobs import JobSpec
from corral.sim.analysis.lp_bound import (
    DEFAULT_SLOTS,
    BoundJob,
    LpBound,
    TypedBoundJob,
    hull_pieces,
    lp_lower_bound,
    lp_lower_bound_typed,
)
from corral.sim.truth.base import AppTruth, Truth
from corral.sim.truth.replay import best_epoch_secs, best_isolated_jct
from corral.sim.truth.scaled import job_app, spec_epochs
from corral.sim.workloads import Workload

#: Largest workload whose bound `corral simulate` computes (the LP grows with jobs x slots;
#: 160 jobs take seconds).
MAX_BOUND_JOBS = 600
#: Geometric steps of total batch size per GPU count when looking for a job's best rate.
RATE_POINTS = 48


def bound_job(spec: JobSpec, app: AppTruth, cluster: Cluster) -> BoundJob:
    """One job's release, work, rate bound and alone-bound (see the module docstring)."""
    per_node = cluster.max_node_gpus
    epochs = spec_epochs(spec, app)
    fixed = None if spec.adaptive else spec.batch_size
    max_bsz = spec.max_bsz if spec.adaptive else spec.batch_size
    limit = max(1, min(cluster.total_gpus, spec.max_gpus))
    args = (per_node, epochs, fixed, spec.max_local_bsz, spec.min_local_bsz, max_bsz)
    secs = np.array([np.minimum(best_epoch_secs(app, k, *args, points=RATE_POINTS),
                                best_epoch_secs(app, k, *args)) for k in range(1, limit + 1)])
    ks = np.arange(1, limit + 1, dtype=float)[:, None]
    ref = np.min(ks * secs, axis=0)  # least GPU-seconds of each epoch
    with np.errstate(divide="ignore", invalid="ignore"):
        speed = np.where(np.isfinite(secs), ref[None, :] / secs, 0.0).max(axis=1)
    pieces, cap = hull_pieces(speed.tolist())
    alone = best_isolated_jct(app, cluster.total_gpus, *args)
    return BoundJob(release_s=spec.submit_time_s, work=float(ref.sum()), pieces=pieces,
                    max_gpus=float(cap), alone_s=alone)


def typed_bound_job(spec: JobSpec, app: AppTruth, cluster: Cluster) -> TypedBoundJob:
    """One job's bound on a cluster of several GPU types: on each type it may use (its
    `gpu_type`, else all), its rate per GPU count on that type (`app.for_type`, up to that
    type's GPUs), against one work: epoch e's reference cost is its least GPU-seconds over types
    and counts, so a type's rate is `max_e ref_e / t_e,type(k)` (see the module docstring)."""
    epochs = spec_epochs(spec, app)
    fixed = None if spec.adaptive else spec.batch_size
    max_bsz = spec.max_bsz if spec.adaptive else spec.batch_size
    per_type = []
    for t in cluster.types_for(spec):
        per_node = cluster.max_node_gpus_of_type(t)
        limit = max(1, min(cluster.gpus_of_type(t), spec.max_gpus))
        app_t = app.for_type(t)
        args = (per_node, epochs, fixed, spec.max_local_bsz, spec.min_local_bsz, max_bsz)
        secs = np.array([np.minimum(best_epoch_secs(app_t, k, *args, points=RATE_POINTS),
                                    best_epoch_secs(app_t, k, *args)) for k in range(1, limit + 1)])
        alone = best_isolated_jct(app_t, cluster.gpus_of_type(t), *args)
        per_type.append((t, secs, alone))
    if not per_type:
        raise ValueError(f"job {spec.name}: the cluster has no GPU type it may run on")
    ref = np.min([np.min(np.arange(1, len(secs) + 1, dtype=float)[:, None] * secs, axis=0)
                  for _, secs, _ in per_type], axis=0)
    rates = []
    for t, secs, _ in per_type:
        with np.errstate(divide="ignore", invalid="ignore"):
            speed = np.where(np.isfinite(secs), ref[None, :] / secs, 0.0).max(axis=1)
        if not np.any(speed > 0):
            continue
        pieces, cap = hull_pieces(speed.tolist())
        rates.append((t, pieces, float(cap)))
    return TypedBoundJob(release_s=spec.submit_time_s, work=float(ref.sum()), rates=tuple(rates),
                         alone_s=min(alone for _, _, alone in per_type))


def workload_lp_bound(workload: Workload, truth: Truth, cluster: Cluster, *,
                      slots: int = DEFAULT_SLOTS) -> LpBound:
    """The LP lower bound on the average JCT of any schedule of `workload` on `cluster`: per
    GPU type on a cluster of several (`typed_bound_job`, `lp_lower_bound_typed`); on one type
    the one-type LP, with the jobs' truth on that type (the unnamed type: the app itself)."""
    per_node = cluster.max_node_gpus
    if cluster.is_mixed:
        typed = [typed_bound_job(spec, job_app(truth, spec, per_node), cluster)
                 for spec in workload.jobs]
        return lp_lower_bound_typed(typed, {t: float(cluster.gpus_of_type(t))
                                            for t in cluster.gpu_types}, slots=slots)
    only = cluster.gpu_types[0] if cluster.gpu_types else ""
    jobs = [bound_job(spec, job_app(truth, spec, per_node).for_type(only), cluster)
            for spec in workload.jobs]
    return lp_lower_bound(jobs, cluster.total_gpus, slots=slots)
