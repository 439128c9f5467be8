"""Shared by the policy tests: a job's view as a policy sees it, and a job estimator that knows
its one-GPU speed on several GPU types."""

from __future__ import annotations

from corral.core.cluster import Placement
from corral.core.jobs import STATUS_PENDING, STATUS_RUNNING, Assignment, JobSpec, JobView
from corral.perf.estimator import JobEstimator


def view(job: JobSpec, placement: Placement | None = None, started: float | None = None,
         estimator: JobEstimator | None = None) -> JobView:
    """`job` waiting, or running on `placement` since `started`, with nothing trained yet."""
    running = placement is not None and bool(placement.slots)
    return JobView(spec=job, status=STATUS_RUNNING if running else STATUS_PENDING,
                   assignment=Assignment(placement) if running else None, attained_gpu_s=0.0,
                   run_time_s=0.0, queue_time_s=0.0, restarts=0, epoch=0, steps=0, progress=0.0,
                   max_gpus_held=placement.num_gpus if running else 0,
                   first_start_s=started if running else None,
                   last_change_s=started if running else None, batch=None, estimator=estimator)


def typed_estimator(step_s: dict[str, float], observed: str | None = None, gpus: int = 1
                    ) -> JobEstimator:
    """A job whose one-GPU step at batch 128 takes `step_s[type]`: on `observed` it ran on 1 to
    `gpus` GPUs (5 % slower per extra GPU, that part syncing); the other types are one-GPU
    profiles (`JobEstimator.bootstrap`)."""
    est = JobEstimator(128, 4096, 16, 1024)
    for t, s in step_s.items():
        if t == observed:
            for k in range(1, gpus + 1):
                est.observe_step(1, k, 128, s * (1 + 0.05 * (k - 1)), s * 0.05 * (k - 1),
                                 count=10, gpu_type=t)
        else:
            est.bootstrap(t, s, 128)
    return est
