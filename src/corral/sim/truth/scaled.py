"""Duration-based jobs: a model's truth with its epochs scaled to the work a trace says a job did.

A `JobSpec` with `trace_duration_s` keeps its model's step times, gradient noise over training
and per-epoch overheads; only each epoch's progress is multiplied by one factor, chosen so the
job alone on its requested GPUs (packed) at the user's batch takes `trace_duration_s`. A job
shorter than its epochs' overheads alone gets a tiny factor. The duration is on the app's own
GPU type (`AppTruth.gpu_type`); `for_type` keeps the factor and takes another type's step times.
"""

from __future__ import annotations

from functools import lru_cache

from corral.core.jobs import JobSpec
from corral.sim.truth.base import AppTruth, Truth
from corral.sim.truth.replay import epoch_gains, remaining_at

#: Smallest factor (a job shorter than its overheads still trains a little).
MIN_FACTOR = 1e-6


class ScaledApp(AppTruth):
    """`app` with each epoch's progress multiplied by `factor` (see the module docstring)."""

    def __init__(self, app: AppTruth, factor: float) -> None:
        self.app = app
        self.factor = float(factor)
        self.speeds = app.speeds
        self.limits = app.limits
        self.epoch_overhead_s = app.epoch_overhead_s
        self._progress = tuple(b * self.factor for b in app.epoch_progress())
        # what does not scale is the app's own, called without this object's frame (a
        # simulated job reads its gradient statistics and metric at every epoch boundary)
        self.step_time = app.step_time  # type: ignore[method-assign]
        self.grad_stats = app.grad_stats  # type: ignore[method-assign]
        self.metric = app.metric  # type: ignore[method-assign]

    def step_time(self, counts: tuple[int, ...], local_bsz: float) -> tuple[float, float]:  # replaced per instance (__init__)
        return self.app.step_time(counts, local_bsz)

    def grad_stats(self, total_bsz: float, epoch: int) -> tuple[float, float]:  # replaced per instance (__init__)
        return self.app.grad_stats(total_bsz, epoch)

    def gain(self, total_bsz: float, epoch: int) -> float:
        return self.app.gain(total_bsz, epoch)

    def epoch_gains(self, total_bsz: float, epochs: int) -> tuple[float, ...]:
        # the app's own, remembered per app: gains do not scale, and the jobs of a trace are
        # thousands of scaled copies of a handful of apps
        return epoch_gains(self.app, total_bsz, epochs)

    def epoch_progress(self) -> tuple[float, ...]:
        return self._progress

    @property
    def gpu_type(self) -> str:  # type: ignore[override]
        return self.app.gpu_type

    def gpu_types(self) -> tuple[str, ...]:
        return self.app.gpu_types()

    def _type_view(self, gpu_type: str) -> AppTruth:
        return ScaledApp(self.app.for_type(gpu_type), self.factor)

    def duration_counts(self, gpus: int, gpus_per_node: int) -> tuple[int, ...]:
        return self.app.duration_counts(gpus, gpus_per_node)

    def metric(self, epoch: int, total_bsz: float) -> float | None:  # replaced per instance (__init__)
        return self.app.metric(epoch, total_bsz)


def spec_epochs(spec: JobSpec, app: AppTruth) -> int:
    """Epochs a job trains (as `SimJob` counts them)."""
    return max(1, min(spec.epochs or app.limits.epochs, len(app.epoch_progress())))


@lru_cache(maxsize=65536)
def _scaled(app: AppTruth, duration_s: float, gpus: int, batch_size: int, max_local_bsz: int,
            epochs: int, gpus_per_node: int) -> ScaledApp:
    spec_batch = JobSpec("x", 0.0, app.limits.app, gpus, batch_size, batch_size, batch_size,
                         1, max_local_bsz).user_batch(gpus)
    steps_s = remaining_at(app, app.duration_counts(gpus, gpus_per_node), spec_batch, epochs, 0, 0.0)[0]
    work_s = duration_s - app.epoch_overhead_s * epochs
    factor = max(work_s / steps_s, MIN_FACTOR) if steps_s > 0 else 1.0
    return ScaledApp(app, factor)


def job_app(truth: Truth, spec: JobSpec, gpus_per_node: int) -> AppTruth:
    """The truth a job trains on: its application's, scaled when it is duration-based."""
    app = truth.app(spec.app)
    if spec.trace_duration_s is None:
        return app
    return _scaled(app, float(spec.trace_duration_s), spec.gpus, spec.batch_size,
                   spec.max_local_bsz, spec_epochs(spec, app), gpus_per_node)
