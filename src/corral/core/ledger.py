"""A job's books, kept the same way for simulated and live jobs (`JobLedger`).

`SimJob` and `LiveJob` are both ledgers (`place`, `hold`, `wait`, `end`, `release`); `view`
builds the `JobView` from the books plus what the job measured, so a policy cannot tell the two
worlds apart. Counting: `restarts` = placements of a job that ran before (resize or resume) plus
crash retries; `relaunches` = those of them that started a new worker set (all but in-place
resizes: Pollux's re-allocation penalty counts these); `preemptions` = placements the policy took away (an ended job is released);
`epochs_since_change` = epochs since the last placement change. A job without GPUs carries
why (`reason`, a `WaitReason`, set by the round loop from the decision) and the seconds waited
are summed per reason kind (`waited_by_reason`). The books are `SimJob`'s own slots (a
subclass), so the simulator's hot loop reads them at no cost.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from corral.core.cluster import NO_PLACEMENT, Placement
from corral.core.jobs import (
    STATUS_PENDING,
    STATUS_RUNNING,
    Assignment,
    BatchConfig,
    JobSpec,
    JobStatus,
    JobView,
    OracleInfo,
)
from corral.core.reasons import ARRIVING, UNEXPLAINED, WaitReason

if TYPE_CHECKING:  # annotation only: core imports nothing above it at run time
    from collections.abc import Sequence

    from corral.core.jobs import FittedModels, MetricRecord

__all__ = ["JobLedger", "completed_view", "LEDGER_FIELDS", "VIEW_FIELDS"]

#: The books, as they are persisted (`to_doc` / `restore`) and in this order.
LEDGER_FIELDS = ("attained_gpu_s", "run_time_s", "queue_time_s", "restarts", "preemptions",
                 "crash_retries", "max_gpus_held", "first_start_s", "last_change_s",
                 "epoch_at_change", "finish_s", "last_start_s", "relaunches")

#: `JobView`'s fields in declaration order: `JobLedger.view` passes them by position.
VIEW_FIELDS = ("spec", "status", "assignment", "attained_gpu_s", "run_time_s", "queue_time_s",
               "restarts", "epoch", "steps", "progress", "max_gpus_held", "first_start_s",
               "last_change_s", "batch", "estimator", "metrics", "epochs_since_change", "oracle",
               "last_start_s", "relaunches")
if tuple(f.name for f in dataclasses.fields(JobView)) != VIEW_FIELDS:
    raise ImportError("JobView's fields changed: update VIEW_FIELDS and JobLedger.view")


class JobLedger:
    """The accounting of one job: placement, time held and waited, restarts, its end."""

    __slots__ = ("spec", "placement", "outcome", "_shown", "reason", "_waited", "_wait_open",
                 *LEDGER_FIELDS)

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self.placement = NO_PLACEMENT
        self._shown: Assignment | None = None  # the last view's assignment (`_assignment`)
        self.outcome: JobStatus | None = None  # DONE or FAILED once the job ended
        self.attained_gpu_s = 0.0  # GPU-seconds held (restart pauses included)
        self.run_time_s = 0.0  # seconds holding GPUs
        self.queue_time_s = 0.0  # seconds active without GPUs
        self.restarts = 0
        self.relaunches = 0  # restarts that started a new worker set (`JobView.relaunches`)
        self.preemptions = 0
        self.crash_retries = 0
        self.max_gpus_held = 0
        self.first_start_s: float | None = None
        self.last_change_s: float | None = None
        self.last_start_s: float | None = None  # its worker set's launch (`JobView.last_start_s`)
        self.epoch_at_change = 0  # the job's epoch when its placement last changed
        self.finish_s: float | None = None
        #: Why the job waits (shown while it has no GPUs; kept from its last wait after).
        self.reason: WaitReason = ARRIVING
        self._waited: dict[str, float] = {}  # seconds per reason kind, up to the last `told`
        self._wait_open = 0.0  # seconds waited since, under `reason`

    # -- changes --------------------------------------------------------------------------
    def place(self, now_s: float, placement: Placement, epoch: int,
              relaunch: bool = True) -> bool:
        """Take the placement a policy decided at `now_s` (empty: preempted), the job being at
        `epoch`; True when it differs from the current one (only then is anything counted).
        `relaunch`: a resize of a running job starts a new worker set (False: in place, its
        workers, `last_start_s` and `relaunches` kept); a start or a resume always does."""
        if placement == self.placement:
            return False
        launches = bool(placement) and (relaunch or not self.placement)
        if launches:
            self.last_start_s = now_s
        if placement:
            if self.first_start_s is None:
                self.first_start_s = now_s
            else:  # resized, or resumed after preemption
                self.restarts += 1
                self.relaunches += launches
            if placement.num_gpus > self.max_gpus_held:
                self.max_gpus_held = placement.num_gpus
        else:
            self.preemptions += 1
        self.placement = placement
        self.last_change_s = now_s
        self.epoch_at_change = epoch
        return True

    def hold(self, dt_s: float) -> None:
        """`dt_s` seconds on the current placement: GPU time."""
        self.run_time_s += dt_s
        self.attained_gpu_s += dt_s * self.placement.num_gpus

    def wait(self, dt_s: float) -> None:
        """`dt_s` seconds active without GPUs: queueing, counted under the current reason
        (summed apart and filed by kind at the next `told`: the simulator's hot loop)."""
        self.queue_time_s += dt_s
        self._wait_open += dt_s

    def told(self, reason: WaitReason | None) -> None:
        """The round loop's reason for a job the decision left without GPUs (None: the
        decision gave none; the job shows UNEXPLAINED)."""
        if self._wait_open:
            self._file_wait()
        self.reason = reason if reason is not None else UNEXPLAINED

    def _file_wait(self) -> None:
        kind = self.reason.kind.value
        self._waited[kind] = self._waited.get(kind, 0.0) + self._wait_open
        self._wait_open = 0.0

    @property
    def waited_by_reason(self) -> dict[str, float]:
        """Seconds waited per reason kind (`WaitKind.value`; a kind never waited for: absent)."""
        if self._wait_open:
            self._file_wait()
        return dict(self._waited)

    def crash_retried(self, count: int = 1) -> None:
        """The job was restarted `count` times after its workers failed (live jobs only)."""
        self.crash_retries += count
        self.restarts += count
        self.relaunches += count

    def end(self, now_s: float, outcome: JobStatus) -> None:
        """The job ended at `now_s` (DONE, or FAILED for any other end); it keeps its placement
        until `release`."""
        self.finish_s = now_s
        self.outcome = outcome

    def release(self) -> None:
        """Give back the GPUs without a decision (the job ended, or the service restarted and
        the job will be placed again): not a preemption, and nothing else is counted."""
        self.placement = NO_PLACEMENT

    # -- what the policy sees -------------------------------------------------------------
    @property
    def view_status(self) -> JobStatus:
        if self.outcome is not None:
            return self.outcome
        return STATUS_RUNNING if self.placement.slots else STATUS_PENDING

    def view(self, epoch: int, steps: int, progress: float, batch: BatchConfig | None,
             fixed_batch: BatchConfig | None, estimator: FittedModels | None,
             metrics: Sequence[MetricRecord],
             oracle: OracleInfo | None = None) -> JobView:
        """The `JobView` of these books and of what the job measured: its `epoch`, `steps`,
        `progress`, the `batch` it trains with, the batch the policy fixed (`fixed_batch`, None
        when the job chooses), its `estimator` and validation `metrics`.

        The view's fields are passed by position, in `VIEW_FIELDS` order (checked below and by
        tests/core): a keyword call of its 20 fields costs 2.4x as much, and the simulator
        makes a view per active job per round."""
        return JobView(
            self.spec, self.view_status, self._assignment(fixed_batch), self.attained_gpu_s,
            self.run_time_s, self.queue_time_s, self.restarts, epoch, steps, progress,
            self.max_gpus_held, self.first_start_s, self.last_change_s, batch, estimator,
            metrics, max(0, epoch - self.epoch_at_change), oracle, self.last_start_s,
            self.relaunches)

    def _assignment(self, fixed_batch: BatchConfig | None) -> Assignment | None:
        """The view's `Assignment(placement, fixed_batch)` (None when not placed). Both are
        immutable, so the object of the last view is shown again while neither has changed
        (a view per active job per round: the simulator's hot loop)."""
        placement = self.placement
        if not placement.slots:
            return None
        shown = self._shown
        if shown is None or shown.placement is not placement or shown.batch is not fixed_batch:
            shown = self._shown = Assignment(placement, fixed_batch)
        return shown

    # -- persistence ----------------------------------------------------------------------
    def books(self) -> dict[str, Any]:
        """The books as plain values (placement as [[node, gpus], ...]), for a JSON store."""
        doc: dict[str, Any] = {name: getattr(self, name) for name in LEDGER_FIELDS}
        doc["placement"] = [list(s) for s in self.placement.slots]
        doc["reason"] = self.reason.to_doc()
        doc["waited_by_reason"] = self.waited_by_reason
        return doc

    def restore(self, doc: dict[str, Any]) -> None:
        """Books written by `books` (fields an older store lacks keep their initial value, but
        `relaunches`: its `restarts`, every one counted as a new worker set)."""
        for name in LEDGER_FIELDS:
            if name in doc:
                setattr(self, name, doc[name])
        if "relaunches" not in doc:
            self.relaunches = self.restarts
        self.placement = Placement.of((n, g) for n, g in doc.get("placement", []))
        if isinstance(doc.get("reason"), dict):
            self.reason = WaitReason.from_doc(doc["reason"])
        waited = doc.get("waited_by_reason")
        if isinstance(waited, dict):
            self._waited = {str(k): float(v) for k, v in waited.items()}
            self._wait_open = 0.0


def completed_view(view: JobView) -> JobView:
    """The view kept of a finished job for a policy that learns from finished jobs
    (`Reads.COMPLETED`): all of it but its estimator, which no policy reads of a
    finished job and which a live job rebuilds from its last report (kept for as long as the
    service runs). The simulator's engine and the live control loop both keep this."""
    return dataclasses.replace(view, estimator=None)
