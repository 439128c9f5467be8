"""The LP bound of a workload: each job's work and best rate per GPU count, from the truth.

A simulated job's speed depends on its epoch, its GPUs and its batch configuration. For the
bound (`corral.sim.analysis.lp_bound`) each job becomes one amount of work and one rate bound:

* epoch e's reference cost `ref_e` is its least GPU-seconds over GPU counts k at the best batch
  (`min_k k t_e(k)`, where `t_e(k)` is the epoch's time alone on k packed GPUs at its best total
  batch, `corral.sim.truth.replay.best_epoch_secs`); the job's work is `W = sum_e ref_e`;
* its rate on k GPUs is at most `S(k) = max_e ref_e / t_e(k)`: in any epoch, a second on k GPUs
  does at most that much reference work, so whatever the order and speed of its epochs, the job
  has done all its work when it finishes. The bound takes the concave hull of S over k = 1 ..
  the job's GPU limit (`min(cluster GPUs, JobSpec.max_gpus)`; policies honour it).

What this assumes, as the current bound (`best_isolated_jct`) does: a job runs fastest on
packed GPUs, and its best batch is found on a grid of total batch sizes (`RATE_POINTS`
geometric steps from M0 to its largest batch, plus the 12 of the current bound). Time outside
steps (epoch overhead, restart pauses) is left out, which only lowers the bound. Each job's
`alone_s` is the current bound (alone on the whole cluster), so the LP bound is never below it.
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
