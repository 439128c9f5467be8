"""One job as the live service tracks it, and the `JobView` a policy sees of it.

A live job's books are the simulated job's `JobLedger` (corral.core.ledger, which also holds the
counting rules): time by the service's clock; steps, epoch, progress, batch and metrics from the
latest report; the estimator rebuilt from the report (empty until the job reports, and a
non-intrusive job never does). `launches` counts worker sets started. GPU time accrues only
while the workers hold their slots, so a policy ranking by attained service (Tiresias) does not
charge a job for another's stop. Reports come typed from the executor (corral.protocol.report:
one with a wrong type anywhere is refused there); `checked_report` also checks the estimator
document in it (perf's), refusing the report when it does not load.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import types
from dataclasses import asdict, dataclass, field
from typing import Any

from corral.core.cluster import Placement
from corral.core.jobs import BatchConfig, JobSpec, JobStatus, JobView
from corral.core.ledger import JobLedger
from corral.perf.efficiency import efficiency
from corral.perf.estimator import JobEstimator
from corral.protocol.report import Report, ReportError
from corral.service.records import AFTER_PREEMPTION, AFTER_SERVICE_RESTART
from corral.service.resizes import PendingResize
from corral.service.submission import Submission, safe_text

__all__ = ["LiveJob", "LiveStatus", "checked_report", "stored_report", "repaired_doc",
           "summary_json"]


class LiveStatus(str, enum.Enum):
    QUEUED = "queued"  # waiting for GPUs (never started, or preempted)
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        return self in (LiveStatus.QUEUED, LiveStatus.RUNNING)


#: How a live job's end shows in its view: done, or failed for every other end (cancelled too).
_OUTCOME = {LiveStatus.DONE: JobStatus.DONE}


@dataclass(eq=False)
class LiveJob(JobLedger):
    """Everything the service keeps about a job (persisted as one JSON document): its books
    (the ledger: placement, time, restarts, ...) and the service's own records."""

    id: str
    submission: Submission
    spec: JobSpec
    status: LiveStatus = LiveStatus.QUEUED
    policy_batch: BatchConfig | None = None  # the batch the policy fixed, if it did
    message: str = ""
    workers: tuple[str, ...] = ()  # executor worker ids, to reclaim after a service restart
    launches: int = 0  # worker sets started, by this and earlier service instances
    crashes: int = 0
    report: Report | None = None
    noted_launch: int = -1  # the last launch whose start (resumed / fresh) was recorded
    #: launches and crashes counted by earlier service instances (this executor counts from 0)
    launch_base: int = 0
    crash_base: int = 0
    exec_events_seen: int = 0  # executor events already recorded (this executor's)
    holding: bool = False  # its workers hold their slots (set from the executor's state)
    #: every resize of a running job once its new worker set trained: {"launch", "mechanism"
    #: (in-place or checkpoint-restart), "from_gpus", "to_gpus", "pause_s" (training stopped),
    #: "to_new_size_s" (decision to the first step at the new size)}
    resizes: list[dict[str, Any]] = field(default_factory=list)
    #: why it waits to be placed again, having run: "" (it never ran, or is placed),
    #: AFTER_PREEMPTION or AFTER_SERVICE_RESTART (corral.service.records; said at its start)
    requeued_after: str = ""
    #: the GPU type of its placement, as the loop placed it ("" the unnamed type; None when
    #: not placed, or placed across types)
    gpu_type: str | None = None
    #: its placement with the nodes' names (`Cluster.placement_text`), set where it is placed
    placement_text: str = "-"
    #: resizes decided and not yet measured, oldest first (corral.service.resizes)
    pending_resizes: list[PendingResize] = field(default_factory=list)
    #: its one-GPU profile per GPU type, {type: (step time, per-GPU batch)}, taken by the
    #: executor before it was first scheduled (`Runtime.profile`; {} when none): seeds the
    #: types its estimator has no model of (`_measured`), as the simulator seeds a new job's
    profile: dict[str, tuple[float, int]] = field(default_factory=dict)
    #: its (`last_start_s`, `relaunches`) before a resize under way (`assign`, `launched`);
    #: None: none
    before_resize: tuple[float | None, int] | None = field(default=None, repr=False)
    #: (report time, estimator, metrics) built from the report of that time (see `_measured`)
    _measured_cache: tuple[Any, JobEstimator, tuple] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        JobLedger.__init__(self, self.spec)  # fresh books; `from_doc` restores stored ones

    # -- from the job's report ------------------------------------------------------------
    @property
    def steps(self) -> int:
        return (self.report.steps or 0) if self.report else 0

    @property
    def epoch(self) -> int:
        return (self.report.epoch or 0) if self.report else 0

    @property
    def progress(self) -> float:
        return float(self.report.progress or 0.0) if self.report else 0.0

    @property
    def metrics(self) -> tuple[tuple[int, int, float], ...]:
        return self._measured()[2]

    @property
    def batch(self) -> BatchConfig | None:
        """The batch it trains with now: its report's, else the policy's. A job that ended
        shows the batch it last reported, as a simulated job shows the one it ended with."""
        if self.report and self.report.batch and (self.outcome is not None or (
                self.placement and self.report.world_size == self.placement.num_gpus)):
            return BatchConfig(*self.report.batch)
        if self.placement:
            return self.policy_batch or self.spec.user_batch(self.placement.num_gpus)
        return None

    @property
    def estimator(self) -> JobEstimator:
        return self._measured()[1]

    def _measured(self) -> tuple[Any, JobEstimator, tuple[tuple[int, int, float], ...]]:
        """The estimator and metrics of the latest report, built once per report (a view is
        built every round: rebuilding them each time cost a third of a 2,000-job run's ticks).
        The estimator has a model of every type the job was profiled on (`profile`)."""
        key = (self.report.time if self.report else None, len(self.profile))
        if self._measured_cache is None or key != self._measured_cache[0]:
            doc = self.report.estimator if self.report else None
            s = self.spec
            estimator = JobEstimator.from_dict(doc) if doc else JobEstimator(
                s.init_bsz, s.max_bsz, s.min_local_bsz, s.max_local_bsz,
                accumulation=True, adaptive=s.adaptive)
            estimator.bootstrap_missing(self.profile)
            metrics = self.report.metrics if self.report else ()
            self._measured_cache = (key, estimator, metrics)
        return self._measured_cache

    def throughput(self) -> float | None:
        """Samples per second at the configuration it trains with now, as its report's
        measured profile says (mean optimizer step time at its GPUs and per-GPU batch);
        None when it has not reported one."""
        b, report = self.batch, self.report
        if b is None or not self.placement or report is None or not report.estimator:
            return None
        try:
            profile = self.estimator.profile()
        except (TypeError, ValueError, KeyError):
            return None
        gpus = self.placement.num_gpus
        times = [step_s for (_, k, m), (_, step_s, _) in profile.items()
                 if k == gpus and m == b.local_bsz and step_s > 0]
        return gpus * b.local_bsz / times[0] if times else None

    def statistical_efficiency(self) -> float | None:
        """Progress per sample at its total batch relative to M0 (Pollux's Eq. 6), from its
        reported gradient statistics; None before it reported any."""
        b = self.batch
        stats = self.estimator.grad_stats if self.report else None
        if b is None or stats is None or not self.placement:
            return None
        return float(efficiency(stats, self.spec.init_bsz, b.total(self.placement.num_gpus)))

    # -- what the policy sees -------------------------------------------------------------
    # (JobLedger.view takes what the job measured; a LiveJob passes its own)
    def view(self) -> JobView:  # type: ignore[override]
        return super().view(epoch=self.epoch, steps=self.steps, progress=self.progress,
                            batch=self.batch, fixed_batch=self.policy_batch,
                            estimator=self.estimator, metrics=self.metrics)

    # -- changes --------------------------------------------------------------------------
    def assign(self, now_s: float, placement: Placement, batch: BatchConfig | None) -> bool:
        """Take a placement decided at `now_s`; True when the placement changed. A resize
        counts as a new worker set (`last_start_s`, `relaunches`) until its first report says it
        was made in place (`launched`): the executor decides that when it carries it out."""
        was, before = self.placement, (self.last_start_s, self.relaunches)
        changed = self.place(now_s, placement, self.epoch)
        if not placement:
            self.before_resize = None
        elif changed and was and self.before_resize is None:
            self.before_resize = before
        if changed:
            self.status = LiveStatus.RUNNING if placement else LiveStatus.QUEUED
            self.requeued_after = "" if placement else AFTER_PREEMPTION
        self.policy_batch = batch if placement else None
        return changed

    def launched(self, in_place: bool) -> None:
        """The first report of a new worker set (of launch number above the last noted): an
        in-place resize kept the job's workers, so its `last_start_s` and `relaunches` are the
        ones before the resize again, once no other resize is pending (`min_runtime_s` counts
        from a real restart and Pollux's penalty counts real restarts, as in the simulator)."""
        if not in_place:
            self.before_resize = None
        elif self.before_resize is not None and not self.pending_resizes:
            (self.last_start_s, self.relaunches), self.before_resize = self.before_resize, None

    def account(self, dt_s: float) -> None:
        """Time passing: GPU time while placed with its workers holding their slots,
        queueing time otherwise."""
        if dt_s <= 0 or not self.status.active:
            return
        if self.placement and self.holding:
            self.hold(dt_s)
        else:
            self.wait(dt_s)

    def requeue(self) -> None:
        """Queue again without a decision (the service restarted): its GPUs are given back
        and it resumes when the policy next places it (a restart, as after a preemption)."""
        if self.placement:  # it held GPUs (a job waiting after preemption keeps waiting)
            self.requeued_after = AFTER_SERVICE_RESTART
        self.release()
        self.policy_batch, self.workers = None, ()
        self.status = LiveStatus.QUEUED

    def finish(self, now_s: float, status: LiveStatus, message: str = "") -> None:
        self.status = status
        self.end(now_s, _OUTCOME.get(status, JobStatus.FAILED))
        self.release()
        self.policy_batch = None
        self.workers = ()
        if message:
            self.message = message

    # -- persistence ----------------------------------------------------------------------
    def to_doc(self) -> dict[str, Any]:
        return {
            "id": self.id, "submission": self.submission.model_dump(mode="json"),
            "submit_time_s": self.spec.submit_time_s, "status": self.status.value,
            "policy_batch": list(asdict(self.policy_batch).values()) if self.policy_batch else None,
            **self.books(),
            "message": self.message, "workers": list(self.workers),
            "launches": self.launches, "crashes": self.crashes,
            "report": self.report.to_doc() if self.report else None,
            "noted_launch": self.noted_launch, "resizes": self.resizes,
            "requeued_after": self.requeued_after, "gpu_type": self.gpu_type,
            "profile": {t: list(v) for t, v in self.profile.items()},
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> LiveJob:
        sub = Submission.model_validate(doc["submission"])
        pb = doc.get("policy_batch")
        job = cls(
            id=doc["id"], submission=sub, spec=sub.spec(doc["id"], doc["submit_time_s"]),
            status=LiveStatus(doc["status"]), policy_batch=BatchConfig(*pb) if pb else None,
            message=doc["message"], workers=tuple(doc["workers"]),
            launches=doc.get("launches", 0), crashes=doc.get("crashes", 0),
            report=stored_report(doc.get("report")), noted_launch=doc.get("noted_launch", -1),
            resizes=list(doc.get("resizes", [])),
            requeued_after=str(doc.get("requeued_after") or ""),
            gpu_type=doc.get("gpu_type") if isinstance(doc.get("gpu_type"), str) else None,
            profile={str(t): (float(step_s), int(local)) for t, (step_s, local)
                     in (doc.get("profile") or {}).items()})
        job.restore(doc)
        if not job.status.active:
            job.outcome = _OUTCOME.get(job.status, JobStatus.FAILED)
        return job

    @staticmethod
    def doc_version() -> str:
        """What decides whether a stored document still loads: the submission's schema and the
        code that reads a document. A service that read every stored job under this version
        (repairing those that failed) need not read the ended ones again under it."""
        digest = hashlib.sha256(json.dumps(Submission.model_json_schema(), sort_keys=True)
                                .encode())
        codes = [LiveJob.from_doc.__func__.__code__,  # type: ignore[attr-defined]
                 JobLedger.restore.__code__]
        while codes:  # with the code of their comprehensions (whose repr names an address)
            code = codes.pop()
            digest.update(code.co_code)
            for const in code.co_consts:
                if isinstance(const, types.CodeType):
                    codes.append(const)
                else:
                    digest.update(repr(const).encode())
        return digest.hexdigest()[:16]

    def record(self) -> tuple[dict[str, Any], str]:
        """What the store keeps of the job: its document, and its summary as JSON text (GET
        /jobs sends the stored texts as they are, without reading any document)."""
        return self.to_doc(), summary_json(self.summary())

    def summary(self) -> dict[str, Any]:
        """What the API shows of the job."""
        b = self.batch
        report = self.report or Report()
        metrics = self.metrics
        return {
            "id": self.id, "name": self.submission.display_name(), "status": self.status.value,
            "command": self.submission.command, "gpus": self.placement.num_gpus,
            "placement": self.placement_text if self.placement else "-",
            "gpu_type": self.gpu_type if self.placement else None,
            "reported_gpu_type": report.gpu_type,
            "batch": [b.local_bsz, b.accum_steps] if b else None,
            "total_bsz": b.total(self.placement.num_gpus) if b and self.placement else None,
            "submit_time_s": self.spec.submit_time_s, "first_start_s": self.first_start_s,
            "finish_s": self.finish_s, "restarts": self.restarts, "launches": self.launches,
            "crashes": self.crashes, "preemptions": self.preemptions,
            "crash_retries": self.crash_retries, "steps": self.steps, "epoch": self.epoch,
            "progress": self.progress, "loss": report.loss,
            "metric": metrics[-1][2] if metrics else None, "attained_gpu_s": self.attained_gpu_s,
            "message": self.message,  # the command once, above: not again in `spec`
            "spec": self.submission.model_dump(mode="json", exclude={"command"}),
            "slots": [list(s) for s in self.placement.slots], "queue_time_s": self.queue_time_s,
            "run_time_s": self.run_time_s, "throughput": self.throughput(),
            "efficiency": self.statistical_efficiency(), "resizes": self.resizes,
            "in_place_resizes": self.in_place_resizes,
            # why it waits (corral.core.reasons), while it waits for GPUs
            "reason": self.reason.to_doc() if self.status is LiveStatus.QUEUED else None,
            "waited_by_reason": self.waited_by_reason,
        }

    @property
    def in_place_resizes(self) -> int:
        """Resizes its workers made without stopping (counted in `restarts` too, as the
        ledger counts every placement change, but no checkpoint-restart)."""
        return sum(1 for r in self.resizes if r.get("mechanism") == "in-place")


def summary_json(summary: dict[str, Any]) -> str:
    """A summary as JSON text; a number that is not finite (a job may report a NaN loss) is
    null, since JSON has no such number."""
    def finite(value: Any) -> Any:
        if isinstance(value, float):
            return value if math.isfinite(value) else None
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [finite(v) for v in value]
        return value

    try:
        return json.dumps(summary, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(finite(summary), separators=(",", ":"), allow_nan=False)


def checked_report(report: Report | None) -> Report | None:
    """`report` (typed by corral.protocol.report) if its estimator document, written by the
    job, loads as a JobEstimator too (or it has none); else None."""
    if report is None or not report.estimator:
        return report
    try:
        JobEstimator.from_dict(dict(report.estimator))
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError):
        return None
    return report


def stored_report(doc: Any) -> Report | None:
    """A report as the store keeps it (`Report.to_doc`); None when there is none, or one an
    older service stored does not parse."""
    if doc is None:
        return None
    try:
        return Report.parse(doc)
    except ReportError:
        return None


def repaired_doc(doc: dict[str, Any], problem: str, now_s: float) -> dict[str, Any]:
    """A stored job whose submission no longer passes validation (stored by a version that
    accepted it), made readable: its command escaped, the rest of the submission reset to
    defaults, and the job failed if it was still active (it could never start). `problem` is
    one line saying what was wrong."""
    sub = s if isinstance(s := doc.get("submission"), dict) else {}
    command = c if isinstance(c := sub.get("command"), list) else []
    safe = [safe_text(str(a), 200) for a in command[:20]] or ["?"]
    readable = Submission(command=safe, cwd="/").checked(1)
    doc = {**doc, "submission": readable.model_dump(mode="json")}
    if doc.get("status") in (LiveStatus.QUEUED.value, LiveStatus.RUNNING.value, "new"):
        doc.update(status=LiveStatus.FAILED.value, finish_s=now_s, placement=[], workers=[],
                   policy_batch=None)
    doc["message"] = safe_text(problem, 300)
    return doc
