"""One job as the live service tracks it, and the `JobView` a policy sees of it.

The view is built field for field as the simulator builds it (corral.sim.job.SimJob.view), so a
policy cannot tell the two worlds apart: time held and waited is accounted by the service's
clock; steps, epoch, progress, batch and metrics come from the job's latest report; the
estimator is rebuilt from the report's `JobEstimator.to_dict()` (an empty one, as a simulated
job starts with, until the job reports - a non-intrusive job never does). `restarts` counts
placement changes of a running job, as in the simulator.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

from corral.core.cluster import Placement
from corral.core.jobs import Assignment, BatchConfig, JobSpec, JobStatus, JobView
from corral.perf.estimator import JobEstimator
from corral.service.submission import Submission

__all__ = ["LiveJob", "LiveStatus"]


class LiveStatus(str, enum.Enum):
    QUEUED = "queued"  # waiting for GPUs (never started, or preempted)
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        return self in (LiveStatus.QUEUED, LiveStatus.RUNNING)


@dataclass
class LiveJob:
    """Everything the service keeps about a job (persisted as one JSON document)."""

    id: str
    submission: Submission
    spec: JobSpec
    status: LiveStatus = LiveStatus.QUEUED
    placement: Placement = field(default_factory=Placement)
    policy_batch: BatchConfig | None = None  # the batch the policy fixed, if it did
    attained_gpu_s: float = 0.0
    run_time_s: float = 0.0
    queue_time_s: float = 0.0
    restarts: int = 0
    max_gpus_held: int = 0
    first_start_s: float | None = None
    last_change_s: float | None = None
    epoch_at_change: int = 0
    finish_s: float | None = None
    message: str = ""
    workers: tuple[str, ...] = ()  # executor worker ids, to reclaim after a service restart
    launches: int = 0  # worker sets started, by this and earlier service instances
    crashes: int = 0
    report: dict[str, Any] | None = None
    #: launches and crashes counted by earlier service instances (this executor counts from 0)
    launch_base: int = 0
    crash_base: int = 0
    _estimator: JobEstimator | None = field(default=None, repr=False)
    _estimator_key: Any = field(default=None, repr=False)

    # -- from the job's report ------------------------------------------------------------
    @property
    def steps(self) -> int:
        return int(self.report.get("steps", 0)) if self.report else 0

    @property
    def epoch(self) -> int:
        return int(self.report.get("epoch", 0)) if self.report else 0

    @property
    def progress(self) -> float:
        return float(self.report.get("progress", 0.0)) if self.report else 0.0

    @property
    def metrics(self) -> tuple[tuple[int, int, float], ...]:
        rows = self.report.get("metrics", []) if self.report else []
        return tuple((int(s), int(e), float(v)) for s, e, v in rows)

    @property
    def batch(self) -> BatchConfig | None:
        """The batch it trains with now: its report's, else the policy's."""
        if self.report and self.report.get("batch") and self.placement and \
                self.report.get("world_size") == self.placement.num_gpus:
            m, s = self.report["batch"]
            return BatchConfig(int(m), int(s))
        if self.placement:
            return self.policy_batch or self.spec.user_batch(self.placement.num_gpus)
        return None

    @property
    def estimator(self) -> JobEstimator:
        key = self.report.get("time") if self.report else None
        if self._estimator is None or key != self._estimator_key:
            doc = self.report.get("estimator") if self.report else None
            s = self.spec
            self._estimator = JobEstimator.from_dict(doc) if doc else JobEstimator(
                s.init_bsz, s.max_bsz, s.min_local_bsz, s.max_local_bsz,
                accumulation=True, adaptive=s.adaptive)
            self._estimator_key = key
        return self._estimator

    # -- what the policy sees -------------------------------------------------------------
    def view(self) -> JobView:
        status = {LiveStatus.RUNNING: JobStatus.RUNNING, LiveStatus.QUEUED: JobStatus.PENDING,
                  LiveStatus.DONE: JobStatus.DONE}.get(self.status, JobStatus.FAILED)
        if status is JobStatus.RUNNING and not self.placement:
            status = JobStatus.PENDING
        return JobView(
            spec=self.spec, status=status,
            assignment=Assignment(self.placement, self.policy_batch) if self.placement else None,
            attained_gpu_s=self.attained_gpu_s, run_time_s=self.run_time_s,
            queue_time_s=self.queue_time_s, restarts=self.restarts, epoch=self.epoch,
            steps=self.steps, progress=self.progress, max_gpus_held=self.max_gpus_held,
            first_start_s=self.first_start_s, last_change_s=self.last_change_s,
            batch=self.batch, estimator=self.estimator, metrics=self.metrics,
            epochs_since_change=max(0, self.epoch - self.epoch_at_change))

    # -- changes --------------------------------------------------------------------------
    def assign(self, now_s: float, placement: Placement, batch: BatchConfig | None) -> bool:
        """Take a placement decided at `now_s`; True when the placement changed."""
        changed = placement != self.placement
        if changed:
            if placement:
                if self.placement:
                    self.restarts += 1
                if self.first_start_s is None:
                    self.first_start_s = now_s
                self.status = LiveStatus.RUNNING
                self.max_gpus_held = max(self.max_gpus_held, placement.num_gpus)
            else:
                self.status = LiveStatus.QUEUED
            self.placement = placement
            self.last_change_s = now_s
            self.epoch_at_change = self.epoch
        self.policy_batch = batch if placement else None
        return changed

    def account(self, dt_s: float) -> None:
        """Time passing: GPU time while placed, queueing time while waiting."""
        if dt_s <= 0 or not self.status.active:
            return
        if self.placement:
            self.run_time_s += dt_s
            self.attained_gpu_s += dt_s * self.placement.num_gpus
        else:
            self.queue_time_s += dt_s

    def finish(self, now_s: float, status: LiveStatus, message: str = "") -> None:
        self.status = status
        self.finish_s = now_s
        self.placement = Placement()
        self.policy_batch = None
        self.workers = ()
        if message:
            self.message = message

    # -- persistence ----------------------------------------------------------------------
    def to_doc(self) -> dict[str, Any]:
        return {
            "id": self.id, "submission": self.submission.model_dump(mode="json"),
            "submit_time_s": self.spec.submit_time_s, "status": self.status.value,
            "placement": [list(s) for s in self.placement.slots],
            "policy_batch": list(asdict(self.policy_batch).values()) if self.policy_batch else None,
            "attained_gpu_s": self.attained_gpu_s, "run_time_s": self.run_time_s,
            "queue_time_s": self.queue_time_s, "restarts": self.restarts,
            "max_gpus_held": self.max_gpus_held, "first_start_s": self.first_start_s,
            "last_change_s": self.last_change_s, "epoch_at_change": self.epoch_at_change,
            "finish_s": self.finish_s, "message": self.message, "workers": list(self.workers),
            "launches": self.launches, "crashes": self.crashes, "report": self.report,
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "LiveJob":
        sub = Submission.model_validate(doc["submission"])
        pb = doc.get("policy_batch")
        return cls(
            id=doc["id"], submission=sub, spec=sub.spec(doc["id"], doc["submit_time_s"]),
            status=LiveStatus(doc["status"]),
            placement=Placement.of((n, g) for n, g in doc.get("placement", [])),
            policy_batch=BatchConfig(*pb) if pb else None,
            attained_gpu_s=doc["attained_gpu_s"], run_time_s=doc["run_time_s"],
            queue_time_s=doc["queue_time_s"], restarts=doc["restarts"],
            max_gpus_held=doc["max_gpus_held"], first_start_s=doc["first_start_s"],
            last_change_s=doc["last_change_s"], epoch_at_change=doc["epoch_at_change"],
            finish_s=doc["finish_s"], message=doc["message"], workers=tuple(doc["workers"]),
            launches=doc.get("launches", 0), crashes=doc.get("crashes", 0),
            report=doc.get("report"))

    def summary(self) -> dict[str, Any]:
        """What the API shows of the job."""
        b = self.batch
        report = self.report or {}
        metrics = self.metrics
        return {
            "id": self.id, "name": self.submission.display_name(), "status": self.status.value,
            "command": self.submission.command, "gpus": self.placement.num_gpus,
            "placement": str(self.placement), "batch": [b.local_bsz, b.accum_steps] if b else None,
            "total_bsz": b.total(self.placement.num_gpus) if b and self.placement else None,
            "submit_time_s": self.spec.submit_time_s, "first_start_s": self.first_start_s,
            "finish_s": self.finish_s, "restarts": self.restarts, "launches": self.launches,
            "crashes": self.crashes, "steps": self.steps, "epoch": self.epoch,
            "progress": self.progress, "loss": report.get("loss"),
            "metric": metrics[-1][2] if metrics else None, "attained_gpu_s": self.attained_gpu_s,
            "message": self.message, "spec": self.submission.model_dump(mode="json"),
        }
