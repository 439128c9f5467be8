"""Early initialisation, executor side (SideCar §III-A, spec 1.3 and 1.6): a job whose new
placement takes slots that running jobs (donors) are giving up - shrinking or stopped by the
same round - starts its workers at once, while the donors keep training.

The sequence, driven by the local executor's background thread:

1. *Plan* (`plan_slots`): a queued job that cannot start on the free slots alone, but can on
   the free slots plus slots donors give up, acquires the free ones and is promised the donors'
   (SlotPool.promise, SideCar's `reserved` state). A shrinking donor gives up its highest ranks'
   slots, those an in-place shrink frees; a stopped donor gives up all of them.
2. *Initialise*: its workers start with `CORRAL_EARLY_START` (corral.protocol.early) on the
   slots it will run on; they build their model and wait at the start gate. The donors are
   held: they keep training, their decision not yet carried out.
3. *Hand over*: once every worker reported ready the donors are let go and shrink or stop by
   their own mechanism (in place or checkpoint-restart); once the promised slots are released
   the job acquires them, the gate opens and the waiting workers take their first step. It is
   the job's next launch from then on.
4. *Fall back*: a worker that exits while it initialises, or a job not ready within
   `timeout_s`, calls the early start off (its workers are killed, its slots and promises
   dropped, an event says why); the donors give their slots up as decided and the job starts
   normally once they are free. A changed decision, a stop or a cancel call it off too.

Only jobs known to wait at the gate start early (`allows_early_start`); `EarlyStart` is the
executor's record of one early start under way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import IO, Any, Mapping, Sequence

from corral.executors.base import WorkerPlan

__all__ = ["EarlyStart", "EARLY_READY_TIMEOUT_S", "allows_early_start", "plan_slots"]

#: Seconds the pre-started workers get to become ready before the early start is called off.
EARLY_READY_TIMEOUT_S = 120.0


def allows_early_start(early_init: bool | None, report: Mapping[str, Any] | None) -> bool:
    """May a job start early? Its submission says so (True), forbids it (False), or leaves it
    to what the job is (None): a job whose earlier launch reported as corral.train does (the
    trainer waits at the gate); any other command is never pre-started, since a script that
    does not wait at the gate would train on GPUs the donor still uses."""
    if early_init is not None:
        return early_init
    return bool(report) and isinstance(report.get("estimator"), dict)  # corral.train writes it


def plan_slots(need: int, free: Sequence[int], donors: Mapping[str, Sequence[int]]
               ) -> tuple[list[int], dict[str, list[int]]] | None:
    """The slots a job of `need` workers starts early on: first the `free` ones, then those
    the `donors` give up (donor id -> its slots that nobody was promised, in its order), donor
    by donor. None when the free slots suffice (it starts normally) or all of them together do
    not (it waits), or when no donor slot is needed."""
    if need <= len(free):
        return None
    taken: dict[str, list[int]] = {}
    missing = need - len(free)
    for donor, slots in donors.items():
        if missing <= 0:
            break
        part = list(slots)[:missing]
        if part:
            taken[donor] = part
            missing -= len(part)
    if missing > 0:
        return None
    return list(free), taken


@dataclass
class EarlyStart:
    """One early start under way: launch `generation` of the job, `plan` on `slots` (the free
    ones it holds and the donors' promised to it)."""

    plan: WorkerPlan
    generation: int
    slots: list[int]
    donors: dict[str, list[int]]  # donor job id -> the slots it gives up to this job
    port: int
    tag: str
    procs: list[Any] = field(default_factory=list)  # rank r's process at index r
    logs: list[IO[bytes]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    ready_at: float | None = None  # when every worker had reported ready (donors let go)
    timeout_s: float = EARLY_READY_TIMEOUT_S

    @property
    def initialising(self) -> bool:
        """Still building: the donors keep training."""
        return self.ready_at is None

    def timed_out(self) -> bool:
        """Not ready `timeout_s` after it started, or its slots not free `timeout_s` after."""
        return time.monotonic() > (self.ready_at or self.started) + self.timeout_s

    def summary(self, now: float) -> str:
        """The event text once it starts: how long its start overlapped the donors' training."""
        ready = (self.ready_at or now) - self.started
        donors = ", ".join(f"job {d} (slots {s})" for d, s in self.donors.items())
        return (f"launch {self.generation}: started early on slots {self.slots}: its "
                f"{len(self.procs)} worker(s) initialised for {ready:.2f} s while {donors} "
                f"trained on (overlap {ready:.2f} s), then waited {now - self.started - ready:.2f} s "
                f"for the donor(s) to give the slots up")
