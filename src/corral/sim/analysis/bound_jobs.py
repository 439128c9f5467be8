"""The LP bound of a workload: each job's work and best rate per GPU count, from the truth.

Epoch e's reference cost is its least GPU-seconds over GPU counts k at the best batch,
`ref_e = min_k k t_e(k)` (`corral.sim.truth.replay.best_epoch_secs`); the job's work is `W =
sum_e ref_e` and its rate on k GPUs at most `S(k) = max_e ref_e / t_e(k)`, taken as a concave
hull up to its GPU limit. Assumed, as `best_isolated_jct`: packed GPUs are fastest, and the
best batch is on a grid (`RATE_POINTS`). Time outside steps is left out (only lowers the
bound); `alone_s` is the isolated bound, so the LP is never below it.
"""

from __future__ import annotations

import numpy as np

from corral.core.cluster import Cluster
from corral.core.jobs import JobSpec
from corral.sim.analysis.lp_bound import (
    DEFAULT_SLOTS,
    BoundJob,
    LpBound,
    hull_pieces,
    lp_lower_bound,
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


def workload_lp_bound(workload: Workload, truth: Truth, cluster: Cluster, *,
                      slots: int = DEFAULT_SLOTS) -> LpBound:
    """The LP lower bound on the average JCT of any schedule of `workload` on `cluster`."""
    per_node = cluster.max_node_gpus
    jobs = [bound_job(spec, job_app(truth, spec, per_node), cluster) for spec in workload.jobs]
    return lp_lower_bound(jobs, cluster.total_gpus, slots=slots)
