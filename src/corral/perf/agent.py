"""The job-side batch choice of the Pollux agent: which (per-GPU batch, accumulation steps) a
job trains with on the GPUs it holds.

After a (re)start a job adopts the goodput-optimal configuration for its allocation (Eq. 13);
within a run it switches only when the model predicts a clear gain (hysteresis), so small model
updates do not make it flap. Before any model exists it splits M0 evenly over its GPUs.
Source: Qiao et al., Pollux (OSDI'21) Sec. 4.1 and 4.3; the restart/hysteresis/no-model rules
are the artifact's, per ../shared/specs/pollux.md section 1.2 ("Decides").
"""

from __future__ import annotations

import math

from corral.core.jobs import BatchConfig
from corral.perf.estimator import JobEstimator
from corral.perf.goodput import GoodputFunction

__all__ = ["choose_batch", "initial_batch", "DEFAULT_HYSTERESIS"]

#: Predicted goodput ratio new/current a running job needs before it changes batch (spec 1.2).
DEFAULT_HYSTERESIS = 1.05


def initial_batch(estimator: JobEstimator, num_gpus: int) -> BatchConfig:
    """M0 split over `num_gpus` (m = ceil(M0/K), s = 0), with the fewest accumulation steps
    that keep m <= max_local_bsz when accumulation is allowed (capped there otherwise)."""
    gpus = max(int(num_gpus), 1)
    local = math.ceil(estimator.init_bsz / gpus)
    accum = 0
    if local > estimator.max_local_bsz:
        if estimator.accumulation:
            accum = math.ceil(local / estimator.max_local_bsz) - 1
            local = math.ceil(estimator.init_bsz / (gpus * (accum + 1)))
        else:
            local = estimator.max_local_bsz
    return BatchConfig(max(local, 1), accum)


def _within_limits(fn: GoodputFunction, num_gpus: int, batch: BatchConfig) -> bool:
    return (fn.min_local_bsz <= batch.local_bsz <= fn.max_local_bsz
            and (batch.accum_steps == 0 or (fn.accumulation and batch.accum_steps > 0))
            and batch.total(num_gpus) <= max(fn.max_bsz, fn.init_bsz))


def choose_batch(estimator: JobEstimator, num_nodes: int, num_gpus: int,
                 current: BatchConfig | None = None, *,
                 hysteresis: float = DEFAULT_HYSTERESIS) -> BatchConfig:
    """Batch configuration for a job on (num_nodes, num_gpus).

    `current=None` means the job (re)started: the optimum is adopted. Otherwise the optimum
    replaces `current` only if its predicted goodput exceeds `hysteresis` x that of `current`
    (a `current` outside the batch limits, or predicted useless, is always replaced).
    """
    fn = estimator.goodput_fn()
    if fn is None:
        return initial_batch(estimator, num_gpus)
    best, local, accum = fn.optimize(num_nodes, num_gpus)
    if best <= 0:  # no allowed batch on this allocation: keep going as before
        return current if current is not None else initial_batch(estimator, num_gpus)
    optimum = BatchConfig(local, accum)
    if current is None or current == optimum or not _within_limits(fn, num_gpus, current):
        return optimum
    now = float(fn.goodput(num_nodes, num_gpus, current.local_bsz, current.accum_steps))
    return optimum if now <= 0 or best > hysteresis * now else current
