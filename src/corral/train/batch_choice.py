"""When an adaptive job changes its batch configuration, and to what.

The choice is Pollux's agent (corral.perf.agent.choose_batch: the goodput-optimal per-GPU batch
and accumulation steps for the GPUs held). What this adds is restraint, because a batch that
flips every epoch (seen live: total 32 -> 192 -> 32 -> 126 ...) keeps the learning rate and the
noise estimate from ever settling and drove a job to chance accuracy:

* A change needs a clear predicted gain: goodput at least `hysteresis` x that of keeping the
  current total batch (also after a restart on another number of GPUs: the total batch carries
  over, split over the new GPUs, unless the optimum beats it clearly).
* A configuration is held for at least `min_hold_steps` optimizer steps before the next change
  (a resize that makes the current split impossible is the exception).
* After a divergence the job returns to its initial batch and holds it.

The last choice and when it was made are checkpointed (`state_dict`), so the restraint holds
across restarts. Torch-free.
"""

from __future__ import annotations

import math
from typing import Any

from corral.core.jobs import BatchConfig
from corral.perf.agent import choose_batch
from corral.perf.estimator import JobEstimator

__all__ = ["BatchController", "split_total", "DEFAULT_HYSTERESIS", "DEFAULT_MIN_HOLD_STEPS"]

DEFAULT_HYSTERESIS = 1.10
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
    """Decides the batch configuration of an adaptive job (see the module docstring)."""

    def __init__(self, hysteresis: float = DEFAULT_HYSTERESIS,
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

