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
    """What the finished jobs of one model say."""

    per_epoch: list[float]  # progress per epoch of each
    log_epochs: list[float]  # ln(epochs run) of each


class Lengths:
    """Per-model history learned from `Snapshot.completed`, and remaining-work estimates."""

    def __init__(self, use_declared: bool = True, learn: bool = True) -> None:
        self.use_declared = use_declared
        self.learn = learn
        self._seen: set[str] = set()
        self._models: dict[str, _Model] = {}
        self._decl_err: list[float] = []  # ln(actual / declared) of finished jobs
        #: this round's progress-per-epoch estimates from running jobs, by model
        self._running_per_epoch: dict[str, float] = {}

    def observe(self, completed: Sequence[JobView], active: Sequence[JobView]) -> None:
        """Take in the finished jobs not seen yet, and this round's running jobs."""
        for view in completed:
            if view.name in self._seen:
                continue
            self._seen.add(view.name)
            if view.epoch < 1 or view.progress <= 0:
                continue
            m = self._models.setdefault(view.spec.app, _Model([], []))
            m.per_epoch.append(view.progress / view.epoch)
            m.log_epochs.append(math.log(view.epoch))
            if view.spec.epochs:
                self._decl_err.append(math.log(view.epoch / view.spec.epochs))
        sums: dict[str, list[float]] = {}
        for view in active:
            if view.epoch >= 1 and view.progress > 0:
                sums.setdefault(view.spec.app, []).append(view.progress / (view.epoch + 0.5))
        self._running_per_epoch = {app: sum(v) / len(v) for app, v in sums.items()}

    def per_epoch(self, view: JobView) -> float | None:
        """Progress per epoch of the job's model, or None where nothing shows it yet."""
        m = self._models.get(view.spec.app)
        if m is not None and m.per_epoch:
            return sum(m.per_epoch) / len(m.per_epoch)
        if view.epoch >= 1 and view.progress > 0:
            return view.progress / (view.epoch + 0.5)
        return self._running_per_epoch.get(view.spec.app)

    def total_epochs(self, view: JobView) -> float | None:
        """The job's total epochs as estimated now, or None (no declaration, no history)."""
        declared = view.spec.epochs if self.use_declared and view.spec.epochs else None
        m = self._models.get(view.spec.app) if self.learn else None
        history = m.log_epochs if m is not None else []
        if not self.learn:
            return float(declared) if declared else None
        estimates = []  # (mean of ln epochs, variance)
        if declared:
            errs = self._decl_err
            var = (DECLARED_PRIOR_VAR + sum(e * e for e in errs)) / (1 + len(errs))
            bias = sum(errs) / (1 + len(errs))
            estimates.append((math.log(declared) + bias, var))
        if history:
            n = len(history)
            mean = sum(history) / n
            spread = sum((x - mean) ** 2 for x in history)
            estimates.append((mean, (HISTORY_PRIOR_VAR + spread) / n))
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

