"""The job-side batch choice of the Pollux agent: which (per-GPU batch, accumulation steps) a
job trains with on the GPUs it holds.

After a (re)start a job adopts the goodput-optimal configuration (Eq. 13); within a run it
switches only on a clear predicted gain (hysteresis); without a model it splits M0 evenly
(Pollux (OSDI'21) §4.1, §4.3, and its artifact). `BatchController` adds restraint for real jobs
(corral.train), since a batch that flips each epoch keeps LR and noise estimates from settling:
clear gain needed also after a restart (`HOLD_HYSTERESIS`), at least `min_hold_steps` per
configuration, the initial batch after a divergence; a job that finds itself on another GPU
type chooses afresh for that type. Simulated jobs use `choose_batch` alone.
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


def initial_batch(estimator: JobEstimator, num_gpus: int,
                  gpu_type: str | None = None) -> BatchConfig:
    """M0 split over `num_gpus` (m = ceil(M0/K), s = 0), with the fewest accumulation steps
    that keep m <= max_local_bsz (of `gpu_type`, default the estimator's current type) when
    accumulation is allowed (capped there otherwise)."""
    gpus = max(int(num_gpus), 1)
    local = math.ceil(estimator.init_bsz / gpus)
    accum = 0
    max_local = estimator.local_bsz_limit(gpu_type)
    if local > max_local:
        if estimator.accumulation:
            accum = math.ceil(local / max_local) - 1
            local = math.ceil(estimator.init_bsz / (gpus * (accum + 1)))
        else:
            local = max_local
    return BatchConfig(max(local, 1), accum)


def _within_limits(fn: GoodputFunction, num_gpus: int, batch: BatchConfig) -> bool:
    return (fn.min_local_bsz <= batch.local_bsz <= fn.max_local_bsz
            and (batch.accum_steps == 0 or (fn.accumulation and batch.accum_steps > 0))
            and batch.total(num_gpus) <= max(fn.max_bsz, fn.init_bsz))


def choose_batch(estimator: JobEstimator, num_nodes: int, num_gpus: int,
                 current: BatchConfig | None = None, *,
                 hysteresis: float = DEFAULT_HYSTERESIS,
                 gpu_type: str | None = None) -> BatchConfig:
    """Batch configuration for a job on (num_nodes, num_gpus) of `gpu_type` (default: the
    estimator's current type), from that type's goodput function.

    `current=None` means the job (re)started: the optimum is adopted. An adaptive job without
    gradient statistics keeps M0 split (its `current` batch when running). Otherwise the optimum
    replaces `current` only if its predicted goodput exceeds `hysteresis` x that of `current`
    (a `current` outside the batch limits, or predicted useless, is always replaced).
    """
    fn = estimator.goodput_fn(gpu_type)
    if fn is None:
        return initial_batch(estimator, num_gpus, gpu_type)
    if estimator.adaptive and estimator.grad_stats is None:
        # A model (e.g. a one-GPU profile of the type) but no gradient statistics yet: the
        # efficiency would be taken as 1 at every batch and the largest batch would win, so
        # the job keeps M0 split (or its batch) until its first statistics, as at a first start.
        return current if current is not None else initial_batch(estimator, num_gpus, gpu_type)
    best, local, accum = fn.optimize(num_nodes, num_gpus)
    if best <= 0:  # no allowed batch on this allocation: keep going as before
        return current if current is not None else initial_batch(estimator, num_gpus, gpu_type)
    optimum = BatchConfig(local, accum)
    if current is None or current == optimum or not _within_limits(fn, num_gpus, current):
        return optimum
    now = float(fn.goodput(num_nodes, num_gpus, current.local_bsz, current.accum_steps))
    return optimum if now <= 0 or best > hysteresis * now else current


HOLD_HYSTERESIS = 1.10
DEFAULT_MIN_HOLD_STEPS = 100


def split_total(estimator: JobEstimator, total: int, num_gpus: int,
                gpu_type: str | None = None) -> BatchConfig:
    """About `total` samples per step over `num_gpus` (of `gpu_type`, default the current
    type): the fewest accumulation steps that keep the per-GPU batch within its limits."""
    gpus = max(int(num_gpus), 1)
    accum = 0
    local = math.ceil(total / gpus)
    max_local = estimator.local_bsz_limit(gpu_type)
    if local > max_local and estimator.accumulation:
        accum = math.ceil(local / max_local) - 1
        local = math.ceil(total / (gpus * (accum + 1)))
    local = min(max(local, estimator.min_local_bsz, 1), max_local)
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
        self.gpu_type = ""  # the GPU type of the configuration chosen last

    def choose(self, estimator: JobEstimator, num_nodes: int, num_gpus: int, step: int,
               current: BatchConfig | None, gpu_type: str | None = None) -> BatchConfig:
        """The configuration for the next steps on (num_nodes, num_gpus) of `gpu_type`
        (default: the estimator's current type). `current` is the configuration in use on
        these GPUs (None right after a start)."""
        if self.total is None or (gpu_type is not None and gpu_type != self.gpu_type):
            # first start of the job, or on another GPU type (a new model, another memory
            # limit): the agent's choice
            if gpu_type is not None:
                self.gpu_type = gpu_type
            return self._adopt(choose_batch(estimator, num_nodes, num_gpus, gpu_type=gpu_type),
                               num_gpus, step)
        keep = (current if current is not None
                else split_total(estimator, self.total, num_gpus, gpu_type))
        if step - self.changed_at_step < self.min_hold_steps:
            return self._adopt(keep, num_gpus, step, change=False)
        best = choose_batch(estimator, num_nodes, num_gpus, keep, hysteresis=self.hysteresis,
                            gpu_type=gpu_type)
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
                "changes": self.changes, "gpu_type": self.gpu_type}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total = None if state.get("total") is None else int(state["total"])
        self.changed_at_step = int(state.get("changed_at_step", 0))
        self.changes = int(state.get("changes", 0))
        self.gpu_type = str(state.get("gpu_type", ""))

