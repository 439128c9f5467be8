"""How fast a job really progresses against what its goodput model says: a per-job factor.

corral turns remaining progress into time with the job's modelled goodput (examples/s at M0,
`JobEstimator.goodput_fn`). Sia needs goodputs only relative to each other; corral needs them
absolute, and two things put them off: a model fitted from few steps, and progress counted in
other units than the model's M0 (a job whose declared batch is not the M0 its progress is
reported in: the Pollux traces' ncf declares 32,768, its progress counts iterations of 256,
and without this a 3-minute ncf job looked 50x longer). What the job reports says how far off:
between two rounds at which it held the same placement (so no restart pause in between), its
progress per second over the model's goodput / M0 there; and, for a job that finished, the
same from its last round to its end (its progress and time holding GPUs since then, where that
round did not move it): a job shorter than two rounds, as most of the traces' ncf jobs, is seen
only so. `factor` is the median of a job's last `KEEP` such ratios, else its model's (the
application's jobs, running or finished), else 1.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import numpy as np

from corral.core.completed import NewlyCompleted
from corral.core.jobs import JobView, Placement

__all__ = ["Rates"]

#: (time s, progress, placement, modelled progress/s, run time s, restarts) at a round
_Seen = tuple[float, float, Placement, float, float, int]

#: the ratios kept per job (the latest), and per application
KEEP = 8


class Rates:
    """Observed over modelled progress rates, per job and per application."""

    def __init__(self) -> None:
        #: per job: (time s, progress, placement, modelled progress/s, run time s, restarts)
        #: at the last round; and those of the jobs that left since
        self._last: dict[str, _Seen] = {}
        self._leaving: dict[str, _Seen] = {}
        self._completed = NewlyCompleted()
        self._jobs: dict[str, deque[float]] = {}
        self._apps: dict[str, deque[float]] = {}
        #: the factors, per job and per application, updated as ratios come in
        self._job_factor: dict[str, float] = {}
        self._app_factor: dict[str, float] = {}

    def observe(self, now_s: float, jobs: Sequence[JobView],
                modelled: Sequence[float] | np.ndarray, completed: Sequence[JobView] = ()
                ) -> None:
        """Take this round's views; `modelled[j]` is job j's modelled progress per second on
        the placement it holds now (0 or not finite: none); `completed`, the finished jobs
        (only those added since the last round are read)."""
        new = self._completed.read(completed)[0]
        if self._leaving:
            for view in new:
                was = self._leaving.get(view.name)
                if (was is not None and view.restarts == was[5]
                        and view.run_time_s > was[4] and view.progress > was[1]):
                    speed = (view.progress - was[1]) / (view.run_time_s - was[4])
                    self._add(self._apps, self._app_factor, view.spec.app,
                              math.log(speed / was[3]))
            self._leaving = {}
        last: dict[str, _Seen] = {}
        for view, rate in zip(jobs, modelled):
            if not view.is_running or not (rate > 0 and math.isfinite(rate)):
                continue
            place = view.placement
            before = self._last.get(view.name)
            if before is not None and before[2] == place and now_s > before[0]:
                seen = (view.progress - before[1]) / (now_s - before[0])
                if seen > 0:
                    ratio = math.log(seen / before[3])
                    self._add(self._jobs, self._job_factor, view.name, ratio)
                    self._add(self._apps, self._app_factor, view.spec.app, ratio)
            last[view.name] = (now_s, view.progress, place, rate, view.run_time_s, view.restarts)
        self._last = last

    @staticmethod
    def _add(ratios: dict[str, deque[float]], factors: dict[str, float], key: str,
             ratio: float) -> None:
        kept = ratios.setdefault(key, deque(maxlen=KEEP))
        kept.append(ratio)
        ordered = sorted(kept)  # the median (statistics.median costs 5x at 2,000 jobs a round)
        mid = len(ordered) // 2
        middle = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        factors[key] = math.exp(middle)

    def factor(self, view: JobView) -> float:
        """Observed over modelled progress per second for `view` (1 with nothing seen)."""
        f = self._job_factor.get(view.name)
        return f if f is not None else self._app_factor.get(view.spec.app, 1.0)

    def job_left(self, name: str) -> None:
        self._jobs.pop(name, None)
        self._job_factor.pop(name, None)
        seen = self._last.pop(name, None)
        if seen is not None:
            self._leaving[name] = seen
