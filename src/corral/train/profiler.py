"""Step and sync times per configuration, fed to the job's `JobEstimator` exactly as the
simulator feeds it (`observe_step` per (N, K, m) of the GPU type the job runs on,
`observe_grad` with gradient statistics).

A step with s accumulation micro-steps takes W = (s+1)*T_grad + T_sync (Pollux Eq. 11 with
gamma = 1); the estimator's profile is keyed by the step time *without* accumulation, so the
equivalent T_iter(s=0) = (W - sync)/(s+1) + sync is recorded (AdaptDL, Pollux's artifact,
derives T_grad so). The first step after a (re)start, a batch change or an epoch boundary is
not profiled (AdaptDL skips the first batch of every pass).
Torch-free.
"""

from __future__ import annotations

from corral.core.jobs import BatchConfig
from corral.perf.estimator import JobEstimator

__all__ = ["StepProfiler"]


class StepProfiler:
    """Turns measured steps into `JobEstimator.observe_step` calls."""

    def __init__(self, estimator: JobEstimator, gpu_type: str = "") -> None:
        self.estimator = estimator
        self.gpu_type = gpu_type  # the steps' GPU type (corral.train.device.gpu_type_of)
        self._skip = True
        self.profiled_steps = 0

    def skip_next(self) -> None:
        """Do not profile the next step (warm-up after a restart, batch change or pause)."""
        self._skip = True

    def record(self, num_nodes: int, num_gpus: int, batch: BatchConfig, wall_s: float,
               sync_s: float) -> None:
        """One optimizer step of `wall_s` seconds (all micro-steps), `sync_s` of it syncing."""
        if self._skip:
            self._skip = False
            return
        if wall_s <= 0:
            return
        sync_s = min(max(sync_s, 0.0), wall_s)
        step_s = (wall_s - sync_s) / (batch.accum_steps + 1) + sync_s
        self.estimator.observe_step(num_nodes, num_gpus, batch.local_bsz, step_s, sync_s,
                                    gpu_type=self.gpu_type)
        self.profiled_steps += 1
