"""One simulated job: trains on its ground truth between scheduling events, analytically.

As the Pollux artifact's simulator: in epoch e at total batch M the job makes `gain(M, e) /
T_step` scale-invariant iterations per second (`T_step = step + s * (step - sync)`), jumping
from epoch boundary to boundary. It observes only what it runs and feeds a `JobEstimator`, as a
real job does; an adaptive job re-chooses its batch after every placement change and epoch
(unless the policy fixed it). Its books are a `JobLedger` (corral.core.ledger).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from corral.core.cluster import NO_PLACEMENT
from corral.core.jobs import (
    Assignment,
    BatchConfig,
    JobSpec,
    JobStatus,
    JobView,
    MetricHistory,
    MetricRecord,
    OracleInfo,
)
from corral.core.ledger import JobLedger
from corral.perf.agent import choose_batch
from corral.perf.estimator import JobEstimator
from corral.sim.truth.base import AppTruth
from corral.sim.truth.replay import epoch_gains


class SimJob(JobLedger):
    """State of one job in the simulator: its books (the ledger) and its training."""

    __slots__ = (
        "truth", "app_truth", "boundaries", "estimator", "batch", "policy_batch", "pause_left_s", "clock_s",
        "epoch", "progress", "steps", "metrics", "slowdown", "_rate", "active_at_arrival", "dry",
        "epoch_start_steps", "ending", "_observed", "_shown_metrics", "_placement_view",
        "gpu_type",
    )
    _ALL_SLOTS = JobLedger.__slots__ + __slots__  # what a prediction copy copies

    def __init__(self, spec: JobSpec, truth: AppTruth) -> None:
        super().__init__(spec)
        self.truth = truth
        #: the job's truth on no particular GPU type; `truth` is it on the placement's type,
        #: set by the engine when a placement on a cluster of named types begins (`set_truth`)
        self.app_truth = truth
        self.boundaries = truth.epoch_progress()
        epochs = spec.epochs or truth.limits.epochs
        self.boundaries = self.boundaries[: max(1, min(epochs, len(self.boundaries)))]
        self.estimator = JobEstimator(
            spec.init_bsz, spec.max_bsz, spec.min_local_bsz, spec.max_local_bsz,
            accumulation=True, adaptive=spec.adaptive)
        self.batch: BatchConfig | None = None
        self.policy_batch = False  # the policy chose the batch: the job's agent keeps out
        self.pause_left_s = 0.0
        self.clock_s = spec.submit_time_s
        self.epoch = 0
        self.progress = 0.0
        self.steps = 0.0
        self.epoch_start_steps = 0.0  # optimizer steps at the last epoch boundary
        self.metrics: list[tuple[int, int, float]] = []
        self.slowdown = 0.0
        self._rate: tuple | None = None  # (gains per epoch, steps/s, total batch) now
        self.active_at_arrival = 1
        self.dry = False  # a prediction copy: observes nothing, keeps its batch
        self.ending = False  # trained its last epoch; finishes when its pause is over
        self._observed: tuple[int, int] | None = None  # (total batch, epoch) last measured
        self._shown_metrics: Sequence[MetricRecord] = ()  # `metrics` as last shown
        self._placement_view: JobView | None = None  # the last `placement_view`
        #: GPU type of the placement (as the engine's `Cluster.placement_type` said when it
        #: assigned it; None: it spans types, and its steps are observed as no type's)
        self.gpu_type: str | None = ""

    # -- what the policy sees -----------------------------------------------------------------
    # (JobLedger.view takes what the job measured; a SimJob passes its own)
    def view(self, oracle: OracleInfo | None = None) -> JobView:  # type: ignore[override]
        batch = self.batch
        return JobLedger.view(self, self.epoch, int(self.steps), self.progress, batch,
                              batch if self.policy_batch else None, self.estimator,
                              self._metrics_shown(), oracle)

    def placement_view(self) -> JobView:
        """`view()` for a policy that reads only placements (`Reads.PLACEMENTS`): the view this method made last
        while the job's status and assignment are the same objects as then (its progress
        fields are then out of date), a fresh one otherwise."""
        shown = self._placement_view
        fixed = self.batch if self.policy_batch else None
        if (shown is None or shown.status is not self.view_status
                or shown.assignment is not self._assignment(fixed)):
            shown = self._placement_view = self.view()
        return shown

    def _metrics_shown(self) -> Sequence[MetricRecord]:
        """The metric history as a view shows it: the list as it is now, not copied (it is only
        appended to; `resume_training` replaces it and resets this), the same object while it
        has not grown."""
        shown = self._shown_metrics
        if len(shown) != len(self.metrics):
            shown = self._shown_metrics = MetricHistory(self.metrics, len(self.metrics))
        return shown

    @property
    def status(self) -> JobStatus:
        return self.view_status

    @property
    def total_epochs(self) -> int:
        return len(self.boundaries)

    # -- applying a decision ------------------------------------------------------------------
    def keeps(self, assignment: Assignment | None) -> bool:
        """Would `assign(assignment)` leave this job exactly as it is? (The engine skips it.)"""
        new = assignment.placement if assignment else NO_PLACEMENT
        if new is not self.placement and new != self.placement:
            return False
        if not new.slots:
            return True
        assert assignment is not None  # (it has slots)
        wanted = assignment.batch
        if wanted is None:
            return not self.policy_batch and self.batch is not None
        return self.policy_batch and (wanted is self.batch or wanted == self.batch)

    def assign(self, now_s: float, assignment: Assignment | None, pause_s: float,
               gpu_type: str | None = "", relaunch: bool = True) -> bool:
        """Take a new assignment at `now_s`; returns True when the placement changed.
        `gpu_type`: the placement's GPU type (`Cluster.placement_type`, computed once per
        assignment; "" on a cluster without types); the job's estimator learns its steps
        as that type's. `relaunch`: a resize starts a new worker set (`Mechanism.relaunches`;
        False: in place, `JobLedger.place`)."""
        new = assignment.placement if assignment else NO_PLACEMENT
        changed = self.place(now_s, new, self.epoch, relaunch)  # the books: restarts, ...
        if new and gpu_type != self.gpu_type:
            self.gpu_type = gpu_type
            self._rate = None  # another type: its steps are measured (observed) anew
        if changed:
            self._rate = None  # first: the batch choice below measures at the new placement
            if new:
                self.pause_left_s = pause_s
            else:
                self.pause_left_s = 0.0
                self.batch = None
        if new:
            wanted = assignment.batch if assignment else None
            if wanted is not None:
                if wanted != self.batch:
                    self.batch = wanted
                    self._rate = None
                self.policy_batch = True
            elif changed or self.policy_batch or self.batch is None:
                self.policy_batch = False
                self._choose_batch(restart=True)
        return changed

    def _choose_batch(self, restart: bool) -> None:
        k, n = self.placement.num_gpus, self.placement.num_nodes
        if self.spec.adaptive:
            self._observe_grad()
            self.batch = choose_batch(self.estimator, n, k, None if restart else self.batch,
                                      gpu_type=self.gpu_type)
        else:
            self.batch = self.spec.user_batch(k)
        self._rate = None

    def restart_from_epoch(self) -> None:
        """Lose the progress made since the last completed epoch (restart without checkpoint)."""
        self.progress = self.boundaries[self.epoch - 1] if self.epoch > 0 else 0.0
        self.steps = self.epoch_start_steps

    def training_state(self) -> dict[str, Any]:
        """What a checkpoint of this job keeps (JSON-safe): its training - epoch, progress,
        steps, metrics and what its estimator observed - not its books, placement or batch,
        which a relaunched job gets anew."""
        return {"epoch": self.epoch, "progress": self.progress, "steps": self.steps,
                "epoch_start_steps": self.epoch_start_steps,
                "metrics": [list(m) for m in self.metrics],
                "estimator": self.estimator.to_dict()}

    def resume_training(self, state: Mapping[str, Any]) -> None:
        """Take back the training of a `training_state()` (a job resumed from its checkpoint,
        before it is placed). A job checkpointed after its last epoch finishes as soon as it
        has paid its placement's pause, as a real job that finds its work done."""
        self.epoch = min(int(state["epoch"]), self.total_epochs)
        self.progress = float(state["progress"])
        self.steps = float(state["steps"])
        self.epoch_start_steps = float(state["epoch_start_steps"])
        self.metrics = [(int(s), int(e), float(v)) for s, e, v in state["metrics"]]
        self._shown_metrics = ()
        self.estimator = JobEstimator.from_dict(state["estimator"])
        self.ending = self.epoch >= self.total_epochs
        self._rate, self._observed = None, None

    def shed_training(self) -> None:
        """Let go of what only training and the policy's views needed, once the job finished:
        its metric history (a record per epoch) and its estimator. Its books stay. Views shown
        earlier keep theirs. A whole production trace otherwise held every finished job's
        history to the end (millions of records)."""
        self.metrics = []
        self._shown_metrics = ()
        self._placement_view = None
        self.estimator = None  # type: ignore[assignment]

    def set_truth(self, truth: AppTruth) -> None:
        """Train at `truth`'s speed from now on (the job's app on another GPU type): the rate
        is measured anew. Its epochs are the same (a type changes step times only)."""
        self.truth = truth
        self._rate = None

    def retype(self, gpu_type: str | None) -> None:
        """Train at the truth of `gpu_type` (`app_truth.for_type`; "" or None, across types:
        `app_truth`'s own) from now on, before an assignment of a placement of that type: the
        engine and the emulated executor both call it. InputError when the application does
        not know the type (nothing changed then)."""
        truth = self.app_truth.for_type(gpu_type) if gpu_type else self.app_truth
        if truth is not self.truth:
            self.set_truth(truth)

    def set_slowdown(self, slowdown: float) -> None:
        if slowdown != self.slowdown:
            self.slowdown = slowdown
            self._rate = None

    # -- training -----------------------------------------------------------------------------
    def _measure_rate(self) -> tuple[tuple[float, ...], float, int]:
        """(gain per epoch, steps/s, total batch) of the current configuration, kept in `_rate`
        until the configuration changes. A new configuration is observed (step and sync time)."""
        b = self.batch
        assert b is not None  # (placed: it trains with a batch)
        k = self.placement.num_gpus
        total = b.total(k)
        step_s, sync_s = self.truth.step_time(self.placement.counts, b.local_bsz)
        gains = epoch_gains(self.truth, total, self.total_epochs)
        speed = (1.0 - self.slowdown) / (step_s + b.accum_steps * (step_s - sync_s))
        if not self.dry and self.gpu_type is not None:
            self.estimator.observe_step(self.placement.num_nodes, k, b.local_bsz, step_s, sync_s,
                                        gpu_type=self.gpu_type)
        self._rate = (gains, speed, total)
        return self._rate

    def _observe_grad(self) -> None:
        """The gradient statistics of the current batch size and epoch (a job measures them).

        The estimator keeps only the latest statistics, so measuring the same (batch, epoch)
        again changes nothing and is skipped; and it reads the truth's statistics only when
        something asks for them (`JobEstimator.observe_grad_later`): under a policy that never
        reads them, nothing is computed.
        """
        if self.placement.slots and self.batch is not None and not self.dry:
            rate = self._rate  # while set, it holds the total batch of this batch and placement
            key = (rate[2] if rate is not None else self.batch.total(self.placement.num_gpus),
                   self.epoch)
            if key != self._observed:
                self._observed = key
                self.estimator.observe_grad_later(self.truth.grad_stats, key)

    def advance(self, to_s: float) -> None:
        """Train (or wait) from the job's clock up to `to_s`: pause, train and cross epochs;
        records completion exactly.

        At an epoch boundary the job records its metric, pauses for the epoch's overhead and, if
        adaptive, re-chooses its batch. The loop keeps its state in locals, with the same arithmetic
        in the same order as step by step. Gradient statistics are measured at the end only when
        their (batch, epoch) key may have changed (an epoch crossed, or `_rate` dropped by a
        configuration change); tests/sim/test_job_caches.py checks the key.
        """
        start = t = self.clock_s
        if to_s <= start or self.finish_s is not None:
            return
        if not self.placement.slots:
            self.wait(to_s - start)
            self.clock_s = to_s
            return
        unchanged, first_epoch = self._rate is not None, self.epoch
        boundaries = self.boundaries
        overhead = self.truth.epoch_overhead_s
        record = None if self.dry else self.truth.metric
        chooses = self.spec.adaptive and not self.policy_batch and not self.dry
        pause, progress, steps, epoch = self.pause_left_s, self.progress, self.steps, self.epoch
        while t < to_s:
            if pause > 0:
                d = min(pause, to_s - t)
                pause -= d
                t += d
                if self.ending and pause <= 0:
                    self._complete(t)
                    break
                continue
            if self.ending:  # resumed from a checkpoint taken after its last epoch
                self._complete(t)
                break
            gains, speed, total_bsz = self._rate or self._measure_rate()
            rate = gains[epoch] * speed
            boundary = boundaries[epoch]
            need = boundary - progress
            d_epoch = need / rate if rate > 0 else math.inf
            if t + d_epoch > to_s:
                d = to_s - t
                progress += rate * d
                steps += d * speed
                t = to_s
                break
            t += d_epoch
            progress = boundary
            steps += d_epoch * speed
            epoch += 1
            self.epoch_start_steps = steps
            if record is not None:
                metric = record(epoch, total_bsz)
                if metric is not None:
                    self.metrics.append((int(steps), epoch, metric))
            if epoch >= len(boundaries):  # the last epoch
                if overhead > 0:
                    self.ending = True
                    pause = overhead
                    continue
                self._complete(t)
                break
            pause += overhead
            if chooses:
                self.pause_left_s, self.progress, self.steps, self.epoch = pause, progress, steps, epoch
                self._rechoose_batch()
        self.pause_left_s, self.progress, self.steps, self.epoch = pause, progress, steps, epoch
        self.hold(t - start)
        self.clock_s = to_s
        if not unchanged or epoch != first_epoch:
            self._observe_grad()

    def _rechoose_batch(self) -> None:
        """The agent's choice at an epoch boundary (an adaptive job choosing its own batch)."""
        self._observe_grad()
        batch = choose_batch(self.estimator, self.placement.num_nodes, self.placement.num_gpus,
                             self.batch, gpu_type=self.gpu_type)
        if batch != self.batch:
            self.batch = batch
            self._rate = None

    def _complete(self, now_s: float) -> None:
        self.end(now_s, JobStatus.DONE)

    def predict_finish_s(self, horizon_s: float) -> float:
        """When the job would finish if nothing changed (inf beyond `horizon_s`).

        Exact for a job at a fixed configuration; for an adaptive job it assumes the current
        batch stays, so the engine treats it as a hint and re-predicts.
        """
        if not self.placement:
            return math.inf
        ghost = SimJob.__new__(SimJob)
        for slot in SimJob._ALL_SLOTS:
            setattr(ghost, slot, getattr(self, slot))
        ghost.dry = True
        ghost.metrics = []
        ghost._waited = {}  # its own: a prediction files nothing into the job's books
        ghost.advance(horizon_s)
        return ghost.finish_s if ghost.finish_s is not None else math.inf

