"""corral's finish-time-fairness guard: per job, its estimated FTF and the weight it earns.

Finish-time fairness (Themis, NSDI'20; Pollux §5.3.1) rates a job by rho = its JCT over its JCT
alone on a 1/N share of the cluster. corral's objective weighs jobs by the work they have left,
so a short job, whose rho a single slow placement or round multiplies, can lose a fast GPU type
to a large job's next larger configuration (the mixed cluster's 3-minute ncf jobs were put on
K80s, 2x slower for them, while one job held all 24 P100s). Here each job's rho is estimated
with what the policy knows: its age, plus its pause and remaining time (`remaining_s`) at its
best configuration now, over its time on a fair share: its whole progress (done and left) at
its best goodput within 1/N of some type's GPUs (N: the jobs present; the configurations the
job is offered, at least its smallest). A job whose rho exceeds `threshold` is weighted by
(rho / threshold)^`power`, as Themis favours the jobs furthest behind their fair share.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from corral.core.cluster import Cluster
from corral.policies.sia.program import Config

__all__ = ["ftf_estimates", "ftf_weights"]


def ftf_estimates(cluster: Cluster, configs: Sequence[Config], goodput: np.ndarray,
                  age_s: np.ndarray, done_s: np.ndarray, work_s: np.ndarray, ref: np.ndarray,
                  finish_s: np.ndarray) -> np.ndarray:
    """Per job, its estimated finish-time fairness rho at its best configuration now.

    `goodput` (jobs, configs) is each job's goodput (0 where not offered); `done_s` and `work_s`
    its progress done and left in seconds at goodput `ref`; `finish_s` (jobs, configs) the
    seconds to its end on each configuration, pause included (inf where not offered)."""
    num_jobs = goodput.shape[0]
    share = np.array([max(1, cluster.gpus_of_type(c.gpu_type) // max(1, num_jobs))
                      for c in configs])
    gpus = np.array([c.gpus for c in configs])
    offered = goodput > 0
    within = offered & (gpus <= share)[None, :]
    # the fair share's goodput: the best within 1/N of a type, else the smallest offered
    smallest = np.where(offered, gpus[None, :], np.iinfo(np.int64).max).min(axis=1)
    fallback = np.where(offered & (gpus[None, :] == smallest[:, None]), goodput, 0.0).max(axis=1)
    fair = np.where(within.any(axis=1), np.where(within, goodput, 0.0).max(axis=1), fallback)
    with np.errstate(divide="ignore", invalid="ignore"):
        alone = (done_s + work_s) * ref / fair
        rho = (age_s + finish_s.min(axis=1)) / alone
    return np.where(np.isfinite(rho) & (alone > 0), rho, 0.0)


def ftf_weights(rho: np.ndarray, threshold: float, power: float) -> np.ndarray:
    """Each job's weight: (rho / threshold)^power where rho exceeds `threshold` (> 0), else 1."""
    return np.maximum(1.0, rho / threshold) ** power
