"""Per-application step-time models pooled from every job's own measurements.

SideCar (SC'20 §III-B-1) and ONES (SC'21 §3.2.1) predict the speed of configurations a job has
not run from a per-job-type profile. Here that profile is built online: the step times every job
of an application has measured (its `JobEstimator` profile) are pooled per application and one
Pollux throughput model (`corral.perf.throughput`) is fitted to them, refitted only when the pool
gains a configuration. Before any job of an application has run there is no model (None).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from corral.core.jobs import JobView
from corral.perf.throughput import ThroughputParams, fit_throughput, iteration_time

__all__ = ["AppSpeedProfiles"]

_Key = tuple[int, int, int]  # (num_nodes, num_gpus, local_bsz)


class AppSpeedProfiles:
    """Pooled measured step times and a fitted throughput model per application."""

    def __init__(self) -> None:
        self._points: dict[str, dict[_Key, tuple[float, float]]] = {}
        self._fits: dict[str, tuple[int, ThroughputParams]] = {}
        self._seen: dict[str, int] = {}  # job name -> configurations already pooled

    def observe(self, views: Iterable[JobView]) -> None:
        """Pool the configurations each job has measured since last time."""
        for view in views:
            est = view.estimator
            if est is None or est.num_configs == self._seen.get(view.name, 0):
                continue
            self._seen[view.name] = est.num_configs
            pool = self._points.setdefault(view.spec.app, {})
            for key, (_, step_s, sync_s) in est.profile().items():
                pool[key] = (step_s, sync_s)

    def forget(self, name: str) -> None:
        """Job `name` left: drop what is kept about it (its measurements stay in the pool)."""
        self._seen.pop(name, None)

    def params(self, app: str) -> ThroughputParams | None:
        """The application's fitted throughput model, or None before any measurement."""
        pool = self._points.get(app)
        if not pool:
            return None
        cached = self._fits.get(app)
        if cached is not None and cached[0] == len(pool):
            return cached[1]
        keys = np.array(list(pool), dtype=float)
        vals = np.array(list(pool.values()), dtype=float)
        fit = fit_throughput(keys[:, 0], keys[:, 1], keys[:, 2], vals[:, 0], vals[:, 1],
                             initial=cached[1] if cached else None)
        self._fits[app] = (len(pool), fit)
        return fit

    def iteration_s(self, app: str, num_nodes: int, num_gpus: int, local_bsz: int,
                    accum_steps: int = 0) -> float | None:
        """Predicted seconds per optimizer step, or None without a model."""
        params = self.params(app)
        if params is None:
            return None
        return float(iteration_time(params, num_nodes, num_gpus, local_bsz, accum_steps))
