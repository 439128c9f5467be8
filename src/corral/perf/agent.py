"""The job-side batch choice of the Pollux agent: which (per-GPU batch, accumulation steps) a
job trains with on the GPUs it holds.

After a (re)start a job adopts the goodput-optimal configuration (Eq. 13); within a run it
switches only on a clear predicted gain (hysteresis); without a model it splits M0 evenly
(Pollux (OSDI'21) §4.1, §4.3, and its artifact). `BatchController` adds restraint for real jobs
(corral.train), since a batch that flips each epoch keeps LR and noise estimates from settling:
clear gain needed also after a restart (`HOLD_HYSTERESIS`), at least `min_hold_steps` per
configuration, the initial batch after a divergence. Simulated jobs use `choose_batch` alone.
"""

from __future__ import annotations

import math
from typing import Any

from corral.core.jobs import BatchConfig
from corral.perf.estimator import JobEstimator
from corral.perf.goodput import GoodputFunction

__all__ = ["choose_batch", "initial_batch", "split_total", "BatchController",
           "DEFAULT_HYSTERESIS", "HOLD_HYSTERESIS", "DEFAULT_MIN_HOLD_STEPS"]

#: Goodput ratio new/current a running job needs before it changes batch (Pollux artifact).
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


HOLD_HYSTERESIS = 1.10
DEFAULT_MIN_HOLD_STEPS = 100


def split_total(estimator: JobEstimator, total: int, num_gpus: int) -> BatchConfig:
    """About `total` samples per step over `num_gpus`: the fewest accumulation steps that keep
    the per-GPU batch within its limits."""
    gpus = max(int(num_gpus), 1)
    accum = 0
    local = math.ceil(total / gpus)
    if local > estimator.max_local_bsz and estimator.accumulation:
        accum = math.ceil(local / estimator.max_local_bsz) - 1
        local = math.ceil(total / (gpus * (accum + 1)))
    local = min(max(local, estimator.min_local_bsz, 1), estimator.max_local_bsz)
    return BatchConfig(local, accum)


class BatchController:
    """Decides the batch configuration of a real adaptive job (see the module docstring)."""

    def __init__(self, hysteresis: float = HOLD_HYSTERESIS,
                 min_hold_steps: int = DEFAULT_MIN_HOLD_STEPS) -> None:
        self.hysteresis = hysteresis
        self.min_hold_steps = min_hold_steps
        self.total: int | None = None  # total batch of the configuration chosen last
        self.changed_at_step = 0
        self.changes = 0

    def choose(self, estimator: JobEstimator, num_nodes: int, num_gpus: int, step: int,
               current: BatchConfig | None) -> BatchConfig:
        """The configuration for the next steps on (num_nodes, num_gpus). `current` is the
        configuration in use on these GPUs (None right after a start)."""
        if self.total is None:  # first start of the job: the agent's choice
            return self._adopt(choose_batch(estimator, num_nodes, num_gpus), num_gpus, step)
        keep = current if current is not None else split_total(estimator, self.total, num_gpus)
        if step - self.changed_at_step < self.min_hold_steps:
            return self._adopt(keep, num_gpus, step, change=False)
        best = choose_batch(estimator, num_nodes, num_gpus, keep, hysteresis=self.hysteresis)
        return self._adopt(best, num_gpus, step, change=best.total(num_gpus) != self.total)

    def _adopt(self, batch: BatchConfig, num_gpus: int, step: int,
               change: bool = True) -> BatchConfig:
        if change:
            self.changed_at_step = step
            self.changes += 1
        self.total = batch.total(num_gpus)
        return batch

    def restart_from(self, batch: BatchConfig, num_gpus: int, step: int) -> BatchConfig:
        """Go back to `batch` (the initial one, after a divergence) and hold it."""
        return self._adopt(batch, num_gpus, step)

    def state_dict(self) -> dict[str, Any]:
        return {"total": self.total, "changed_at_step": self.changed_at_step,
                "changes": self.changes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total = None if state.get("total") is None else int(state["total"])
        self.changed_at_step = int(state.get("changed_at_step", 0))
        self.changes = int(state.get("changes", 0))

