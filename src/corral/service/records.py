"""The words the service records for what happened to a job, from one place, so that the
dashboard, `corral describe`, `corral jobs --json` and /metrics name each thing alike.

`LaunchStart`: how a launch started, and a resize's mechanism - "fresh", "checkpoint-restart"
(new workers restored a checkpoint) or "in-place" (no checkpoint read). A service restart: a job
that held GPUs gets a "requeued" event saying so and a 0-GPU assignment from when its workers
stopped holding them (the orderly shutdown, `note_shutdown`; else the restart, since a killed
service's workers train on until reclaimed); its next start says "again, after a service
restart" (`again_words`), where one after the policy's preemption says "again, after preemption".
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from corral.core.cluster import Placement

if TYPE_CHECKING:
    from corral.service.jobs import LiveJob
    from corral.service.store import Store

__all__ = ["AFTER_PREEMPTION", "AFTER_SERVICE_RESTART", "again_words", "note_shutdown",
           "take_shutdown", "book_downtime", "note_service_restart", "LaunchStart", "IN_PLACE",
           "CHECKPOINT_RESTART", "RESIZE_MECHANISMS", "launch_start", "launch_event"]


class LaunchStart(str, enum.Enum):
    """How a launch (a worker set) of a job started, from its first report's `resumed`; a
    resize's mechanism is named by the same words (`RESIZE_MECHANISMS`). Shown as they are in
    the dashboard's and `corral describe`'s launches (the telemetry's `launch_start`), the
    resizes of `corral jobs --json` (`mechanism`) and /metrics (`mechanism` label)."""

    FRESH = "fresh"  # from the beginning: no checkpoint to resume from
    CHECKPOINT_RESTART = "checkpoint-restart"  # new workers restored the job's checkpoint
    IN_PLACE = "in-place"  # resized in place: the state came from the workers already running


IN_PLACE = LaunchStart.IN_PLACE.value
CHECKPOINT_RESTART = LaunchStart.CHECKPOINT_RESTART.value
#: how a running job is resized: the words of `LiveJob.resizes[].mechanism` and /metrics
RESIZE_MECHANISMS = (IN_PLACE, CHECKPOINT_RESTART)


def launch_start(resumed: Mapping[str, Any] | None) -> LaunchStart:
    """How the launch whose first report holds `resumed` started (corral.train writes it:
    None for a fresh start, {"checkpoint", ...} after a restore, {"in_place", ...} after an
    in-place resize)."""
    if not isinstance(resumed, Mapping) or not resumed:
        return LaunchStart.FRESH
    if resumed.get("in_place") is not None:
        return LaunchStart.IN_PLACE
    return LaunchStart.CHECKPOINT_RESTART


def launch_event(resumed: Mapping[str, Any] | None, launch: int) -> tuple[str, str] | None:
    """The event (kind, detail) that records where launch `launch` started from: "resumed"
    from a checkpoint, "fresh" for a later launch without one; None for the first fresh launch
    and for an in-place resize (its "resize-pause" event records it)."""
    start = launch_start(resumed)
    if start is LaunchStart.IN_PLACE:
        return None
    if start is LaunchStart.CHECKPOINT_RESTART:
        assert resumed is not None
        return ("resumed", f"resumed from checkpoint {resumed.get('checkpoint')} at epoch "
                           f"{resumed.get('epoch')} (step {resumed.get('steps')})")
    return ("fresh", "started fresh (no usable checkpoint)") if launch > 0 else None

#: why a job that had run waits to be placed again (`LiveJob.requeued_after`)
AFTER_PREEMPTION = "preemption"
AFTER_SERVICE_RESTART = "a service restart"

_SHUTDOWN_META = "shutdown_s"  # service time of the last orderly shutdown, until recovered


def again_words(requeued_after: str) -> str:
    """What a start of a job that ran before adds: ' (again, after preemption)'."""
    return f" (again, after {requeued_after or AFTER_PREEMPTION})"


def note_shutdown(store: Store, now_s: float) -> None:
    """The service stops in order at `now_s` (service time): every job's workers are asked to
    checkpoint and stop now, so their GPUs are free from here (read by `take_shutdown`)."""
    store.set_meta(_SHUTDOWN_META, repr(float(now_s)))


def take_shutdown(store: Store) -> float | None:
    """The time of the orderly shutdown before this start, once (None after a kill)."""
    value = store.meta(_SHUTDOWN_META)
    if not value:
        return None
    store.set_meta(_SHUTDOWN_META, "")
    try:
        return float(value)
    except ValueError:
        return None


def book_downtime(job: LiveJob, now_s: float, shutdown_s: float | None) -> None:
    """Count the time `job`'s stored books do not cover (from where they end, submission plus
    run and queue time, to the restart at `now_s`): held GPUs until its workers stopped (at
    the orderly shutdown `shutdown_s`; after a kill they trained on until reclaimed now), and
    waited after. Without it a restart's downtime was in neither, and a job's run and queue
    time no longer added up to its age."""
    accounted = job.spec.submit_time_s + job.run_time_s + job.queue_time_s
    if job.placement:
        held_until = shutdown_s if shutdown_s is not None and shutdown_s <= now_s else now_s
        if held_until > accounted:
            job.hold(held_until - accounted)
            accounted = held_until
    if now_s > accounted:
        job.wait(now_s - accounted)


def note_service_restart(store: Store, job: LiveJob, now_s: float,
                         shutdown_s: float | None) -> None:
    """`job` held GPUs when the service stopped and is queued again at the restart (`now_s`):
    a 0-GPU assignment from when its workers stopped holding them and a "requeued" event
    saying why."""
    held = f"{job.placement.num_gpus} GPU(s) ({job.placement_text})"
    if shutdown_s is not None and shutdown_s <= now_s:
        since = shutdown_s
        how = (f"the service was stopped at {shutdown_s:.1f} s (its workers were asked to "
               f"checkpoint and stop) and restarted at {now_s:.1f} s")
    else:
        since = now_s
        how = (f"the service was killed and restarted at {now_s:.1f} s (its workers, left "
               "running, were reclaimed: asked to checkpoint and stop)")
    store.add_assignment(since, job.id, str(Placement()), 0, None)
    store.add_event(now_s, job.id, "requeued",
                    f"after a service restart: {how}; it held {held} and waits to be placed "
                    "again (it resumes from its checkpoint)")
