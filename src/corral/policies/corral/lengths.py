"""How much work a job has left, from what a real scheduler knows: its declared length
(`JobSpec.epochs`), its own progress, and the finished jobs of the same model.

Work is counted in progress units (scale-invariant iterations at the job's M0, `JobView.progress`).
A job's remaining work is (total epochs x progress per epoch) - progress, where

* progress per epoch of a model is learned: exact from its finished jobs (final progress over
  final epochs), else from running jobs past their first epoch (progress over epochs + 1/2);
* the total epochs combine, in log space and weighted by inverse variance, the job's declared
  epochs (their error variance learned from finished jobs: declared against run) and the
  model's finished jobs' epoch counts (their variance, plus a prior over their number). Either
  alone stands when the other is missing; with neither, the length is unknown;
* a running job is never taken to end before its current epoch does.

Where the scale is unknown (no job of the model has finished an epoch) `remaining` is None and
the policy falls back to time (`attained`: a job is expected to run as long again as it has).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from corral.core.completed import NewlyCompleted
from corral.core.jobs import JobView

__all__ = ["Lengths"]

#: Prior variance of ln(actual / declared epochs) before any finished job shows the users'
#: error: declarations are trusted (one pseudo-observation of this size).
DECLARED_PRIOR_VAR = 0.01
#: Prior variance of ln(epochs) among one model's jobs, as a pseudo-observation: one finished
#: job of a model says little about the next.
HISTORY_PRIOR_VAR = 0.25


@dataclass
class _Model:
    """What the finished jobs of one model say: sums, so each estimate costs O(1)."""

    n: int = 0
    per_epoch_sum: float = 0.0  # progress per epoch, summed over the jobs
    log_sum: float = 0.0  # ln(epochs run), summed
    log_sq_sum: float = 0.0  # ln(epochs run) squared, summed

    def add(self, per_epoch: float, log_epochs: float) -> None:
        self.n += 1
        self.per_epoch_sum += per_epoch
        self.log_sum += log_epochs
        self.log_sq_sum += log_epochs * log_epochs


class Lengths:
    """Per-model history learned from `Snapshot.completed`, and remaining-work estimates."""

    def __init__(self, use_declared: bool = True, learn: bool = True) -> None:
        self.use_declared = use_declared
        self.learn = learn
        self._seen: set[str] = set()
        self._completed = NewlyCompleted()  # a round reads only the jobs finished since the last
        self._models: dict[str, _Model] = {}
        #: ln(actual / declared epochs) of finished jobs: count, sum, sum of squares
        self._errs = (0, 0.0, 0.0)
        #: this round's progress-per-epoch estimates from running jobs, by model
        self._running_per_epoch: dict[str, float] = {}
        #: this round's `total_epochs` by (model, declared epochs): the same for every job of a
        #: model declaring the same, and asked for each of 2,000 jobs a round
        self._totals: dict[tuple[str, int | None], float | None] = {}

    def observe(self, completed: Sequence[JobView], active: Sequence[JobView]) -> None:
        """Take in the finished jobs not seen yet, and this round's running jobs."""
        for view in self._completed.read(completed)[0]:
            if view.name in self._seen:
                continue
            self._seen.add(view.name)
            if view.epoch < 1 or view.progress <= 0:
                continue
            self._models.setdefault(view.spec.app, _Model()).add(view.progress / view.epoch,
                                                                  math.log(view.epoch))
            if view.spec.epochs:
                e = math.log(view.epoch / view.spec.epochs)
                n, total, squares = self._errs
                self._errs = (n + 1, total + e, squares + e * e)
        sums: dict[str, list[float]] = {}
        for view in active:
            if view.epoch >= 1 and view.progress > 0:
                sums.setdefault(view.spec.app, []).append(view.progress / (view.epoch + 0.5))
        self._running_per_epoch = {app: sum(v) / len(v) for app, v in sums.items()}
        self._totals = {}

    def per_epoch(self, view: JobView) -> float | None:
        """Progress per epoch of the job's model, or None where nothing shows it yet."""
        m = self._models.get(view.spec.app)
        if m is not None and m.n:
            return m.per_epoch_sum / m.n
        if view.epoch >= 1 and view.progress > 0:
            return view.progress / (view.epoch + 0.5)
        return self._running_per_epoch.get(view.spec.app)

    def total_epochs(self, view: JobView) -> float | None:
        """The job's total epochs as estimated now, or None (no declaration, no history)."""
        declared = view.spec.epochs if self.use_declared and view.spec.epochs else None
        key = (view.spec.app, declared)
        if key not in self._totals:
            self._totals[key] = self._total(view.spec.app, declared)
        return self._totals[key]

    def _total(self, app: str, declared: int | None) -> float | None:
        """`total_epochs` of a job of model `app` declaring `declared` (None: nothing)."""
        if not self.learn:
            return float(declared) if declared else None
        m = self._models.get(app)
        estimates = []  # (mean of ln epochs, variance)
        if declared:
            n, total, squares = self._errs
            var = (DECLARED_PRIOR_VAR + squares) / (1 + n)
            estimates.append((math.log(declared) + total / (1 + n), var))
        if m is not None and m.n:
            mean = m.log_sum / m.n
            spread = max(0.0, m.log_sq_sum - m.n * mean * mean)
            estimates.append((mean, (HISTORY_PRIOR_VAR + spread) / m.n))
        if not estimates:
            return None
        weights = [1.0 / max(v, 1e-9) for _, v in estimates]
        log_total = sum(w * mu for w, (mu, _) in zip(weights, estimates)) / sum(weights)
        return math.exp(log_total)

    def remaining(self, view: JobView) -> float | None:
        """Progress the job has left, or None where its scale is unknown."""
        per_epoch = self.per_epoch(view)
        if per_epoch is None or per_epoch <= 0:
            return None
        total = self.total_epochs(view)
        at_least = (view.epoch + 1) * per_epoch - view.progress  # the current epoch's end
        if total is None:  # no length known: as much again as done (at least its epoch)
            return max(view.progress, at_least, 1e-3 * per_epoch)
        return max(total * per_epoch - view.progress, at_least, 1e-3 * per_epoch)

