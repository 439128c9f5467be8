"""Early initialisation, executor side (SideCar (SC'20) §III-A); protocol: corral.protocol.early.

A job placed on slots that donors (shrunk or stopped by the same round) give up starts its
workers at once while the donors train on. The sequence: *plan* (`plan_slots`: free
slots taken, donors' promised; a donor gives up its highest ranks per node, a stopped one all),
*initialise* (workers wait at the gate, donors held by `keeps_training`), *hand over* (when all
are ready the donors resize or stop; then the gate opens), *fall back* (a worker exit,
`timeout_s`, a changed decision, stop or cancel; an `early-init-fallback` event, nothing lost).
Only jobs with `allows_early_start`; `EarlyStart` records one under way. `EarlyStarts` is the
sequence, a part of the job table; a backend gives it its slots and worker sets (`EarlySlots`).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from corral.executors.base import ExecState
from corral.executors.lifecycle import JobRecord, JobTable
from corral.protocol.early import clear_gate, open_gate
from corral.protocol.inplace import ready_ranks
from corral.protocol.report import Report

__all__ = ["EarlyStart", "EarlySlots", "EarlyStarts", "EARLY_READY_TIMEOUT_S",
           "allows_early_start", "plan_slots"]

#: Seconds the pre-started workers get to become ready before the early start is called off.
EARLY_READY_TIMEOUT_S = 120.0

S = TypeVar("S", bound=Hashable)  # a slot, in the executor's terms
N = TypeVar("N", bound=Hashable)  # a node, in the executor's terms


def allows_early_start(early_init: bool | None, report: Report | None) -> bool:
    """May a job start early? Its submission says so (True), forbids it (False), or leaves it
    to what the job is (None): a job whose earlier launch reported as corral.train does (the
    trainer waits at the gate); any other command is never pre-started, since a script that
    does not wait at the gate would train on GPUs the donor still uses."""
    if early_init is not None:
        return early_init
    return report is not None and report.estimator is not None  # corral.train writes it


def plan_slots(need: Mapping[N, int], free: Mapping[N, Sequence[S]],
               donors: Mapping[str, Mapping[N, Sequence[S]]]
               ) -> tuple[list[S], dict[str, list[S]]] | None:
    """The slots a job that needs `need[n]` workers on each node n starts early on: on each
    node, first the `free` ones, then those the `donors` give up there (donor id -> node ->
    its slots that nobody was promised, in its order), donor by donor. Returns (the free slots
    taken, donor id -> the slots it gives up to the job); None when the free slots suffice on
    every node (it starts normally) or free and donated ones together do not on some node (it
    waits)."""
    taken_free: list[S] = []
    taken: dict[str, list[S]] = {}
    for node, count in need.items():
        here = list(free.get(node, ()))
        taken_free += here[:count]
        missing = count - len(here)
        for donor, slots in donors.items():
            if missing <= 0:
                break
            part = list(slots.get(node, ()))[:missing]
            if part:
                taken.setdefault(donor, []).extend(part)
                missing -= len(part)
        if missing > 0:
            return None
    return (taken_free, taken) if taken else None


@dataclass
class EarlyStart:
    """One early start under way: launch `generation` of the job, for `target` (the job's
    target when it began), on `slots` (the free ones it holds and the donors' promised to it).
    An executor subclasses it with its worker set."""

    target: Any
    generation: int
    slots: list[Any]
    donors: dict[str, list[Any]]  # donor job id -> the slots it gives up to this job
    started: float = field(default_factory=time.monotonic)
    ready_at: float | None = None  # when every worker had reported ready (donors let go)
    timeout_s: float = EARLY_READY_TIMEOUT_S

    @property
    def initialising(self) -> bool:
        """Still building: the donors keep training."""
        return self.ready_at is None

    @property
    def promised(self) -> list[Any]:
        """The donors' slots promised to the job."""
        return [s for slots in self.donors.values() for s in slots]

    def timed_out(self) -> bool:
        """Not ready `timeout_s` after it started, or its slots not free `timeout_s` after."""
        return time.monotonic() > (self.ready_at or self.started) + self.timeout_s

    def summary(self, now: float) -> str:
        """The event text once it starts: how long its start overlapped the donors' training."""
        ready = (self.ready_at or now) - self.started
        donors = ", ".join(f"job {d} (slots {s})" for d, s in self.donors.items())
        return (f"launch {self.generation}: started early on slots {self.slots}: its "
                f"{len(self.slots)} worker(s) initialised for {ready:.2f} s while {donors} "
                f"trained on (overlap {ready:.2f} s), then waited {now - self.started - ready:.2f} s "
                f"for the donor(s) to give the slots up")


J = TypeVar("J", bound=JobRecord)
J_contra = TypeVar("J_contra", bound=JobRecord, contravariant=True)


class EarlySlots(Protocol[J_contra]):
    """What a backend gives the early-start sequence: its slots and its worker sets."""

    def plan(self, j: J_contra) -> tuple[list[Any], dict[str, list[Any]]] | None:
        """`plan_slots` for queued job `j` over the backend's free and donated slots (None:
        it does not start early)."""

    def record(self, j: J_contra, generation: int, free: list[Any],
               donors: dict[str, list[Any]]) -> EarlyStart:
        """The record of `j`'s early start on `free` slots and the `donors'` (taking the free
        ones and the promises where the backend books slots itself)."""

    def start(self, j: J_contra) -> str | None:
        """Start (or begin starting) `j.early`'s workers with CORRAL_EARLY_START; why they
        could not (None: under way)."""

    def failure(self, j: J_contra) -> str | None:
        """Move `j.early`'s worker set on; why it failed (a worker exited or was lost), None
        while it is fine."""

    def donor_keeps(self, d: J_contra, slots: Sequence[Any]) -> bool:
        """Running job `d` still holds some of `slots` (promised away) and is now told to keep
        it (its decision changed)."""

    def handed_over(self, j: J_contra) -> bool:
        """Every donor has released the slots promised to `j` (its workers there are gone)."""

    def take(self, j: J_contra, e: EarlyStart) -> None:
        """The early workers become `j`'s worker set, on the slots it now holds; sets `j.plan`."""

    def drop(self, j: J_contra) -> None:
        """End `j.early`'s workers and give up what it held or was promised (`j.early` None)."""


class EarlyStarts(Generic[J]):
    """The early-start sequence of the module docstring, a part of a job table (`table`, whose
    jobs it starts early) over a backend's slots (`slots`, `EarlySlots`). The table asks it
    whether a stop waits for its next pass (`defers_give_up`), whether a donor trains on
    (`keeps_training`), to start queued jobs early (`plan_starts`) and to move one on
    (`advance`)."""

    def __init__(self, table: JobTable[J], slots: EarlySlots[J], *,
                 timeout_s: float = EARLY_READY_TIMEOUT_S) -> None:
        self.table = table
        self.slots = slots
        self.timeout_s = timeout_s

    def keeps_training(self, j: J) -> bool:
        """Does running job `j` keep training on slots it was told to give up (a job that
        takes them is still initialising early)?"""
        return any(o.early is not None and o.early.initialising and j.launch.job_id in o.early.donors
                   for o in self.table.jobs())

    def plan_starts(self) -> None:
        """Start early every queued job that can run on free slots plus slots donors give up."""
        t = self.table
        now = time.monotonic()
        for j in sorted(t.jobs(), key=lambda j: j.queued_at):
            if (j.state is not ExecState.QUEUED or t.has_workers(j) or j.target is None
                    or now < j.not_before or t.launch_number(j) == j.no_early_for):
                continue
            planned = self.slots.plan(j)
            if planned is not None and allows_early_start(j.launch.early_init,
                                                          t.files.report(j.launch.job_id)):
                t.guarded(j, "cannot start it early", self._begin, j, *planned)

    def let_go(self) -> set[str]:
        """Donors whose incoming job is ready: they are giving their slots up now."""
        return {d for o in self.table.jobs() if o.early is not None and not o.early.initialising
                for d in o.early.donors}

    def open_donors(self) -> tuple[set[Any], list[J]]:
        """What a backend plans donors from: the slots already promised, and the jobs that may
        still give slots up (not starting early themselves, not let go yet)."""
        let_go = self.let_go()
        return set(self.promised_slots()), [d for d in self.table.jobs() if d.early is None
                                             and d.launch.job_id not in let_go]

    def promised_slots(self) -> list[Any]:
        """Every donor slot promised to a job starting early."""
        return [s for o in self.table.jobs() if o.early is not None for s in o.early.promised]

    def _begin(self, j: J, free: list[Any], donors: dict[str, list[Any]]) -> None:
        t = self.table
        generation = t.launch_number(j)
        j.early = e = self.slots.record(j, generation, free, donors)
        e.timeout_s = self.timeout_s
        clear_gate(t.files.control_dir(j.launch.job_id), generation, len(e.slots))
        t.event(j, "early-init", f"launch {generation}: starting {len(e.slots)} worker(s) "
                f"early on slots {e.slots}; donor job(s) {', '.join(donors)} train on until "
                "they are ready")
        why = self.slots.start(j)
        if why:
            self.call_off(j, f"a worker could not start: {why}")

    def advance(self, j: J) -> None:
        """One look at the early start under way: call it off, let the donors go once every
        worker is ready, start it once the donors' slots are free."""
        e, t = j.early, self.table
        assert e is not None
        if j.state is ExecState.STOPPING:  # stopped, cancelled or shut down meanwhile
            t.exited(j)
            return
        if j.state is not ExecState.QUEUED or j.target != e.target:
            self.call_off(j, "its placement changed")
            return
        why = self.slots.failure(j)
        kept = [d for d, slots in e.donors.items()
                if (k := t.job(d)) is not None and self.slots.donor_keeps(k, slots)]
        if why:
            self.call_off(j, why)
        elif kept:
            self.call_off(j, f"{', '.join(kept)} keep(s) the slots (decision changed)")
        elif e.timed_out():
            self.call_off(j, f"its workers were not ready within {e.timeout_s:g} s")
        elif e.initialising:
            if set(range(len(e.slots))) <= ready_ranks(t.files.control_dir(j.launch.job_id),
                                                       e.generation):
                self._let_donors_go(j)
        elif self.slots.handed_over(j):
            self._start_now(j)

    def _let_donors_go(self, j: J) -> None:
        """Every early worker is ready: the donors now give their slots up."""
        e = j.early
        assert e is not None
        e.ready_at = now = time.monotonic()
        for donor, slots in e.donors.items():
            d = self.table.job(donor)
            if d is not None:
                self.table.event(d, "donated", f"trained on for {now - e.started:.2f} s while "
                                 f"{j.launch.job_id} initialised early; now gives up slots {slots}")

    def _start_now(self, j: J) -> None:
        """The slots are free: the waiting workers are the job's new launch; open the gate."""
        e, j.early = j.early, None
        assert e is not None
        self.slots.take(j, e)
        j.state, j.started_at = ExecState.RUNNING, time.time()
        j.launches += 1
        open_gate(self.table.files.control_dir(j.launch.job_id), e.generation)
        self.table.event(j, "early-started", e.summary(time.monotonic()))

    def call_off(self, j: J, why: str) -> None:
        """The early start failed or is not wanted: end it; the job starts normally later."""
        assert j.early is not None
        generation = j.early.generation
        self.slots.drop(j)
        j.no_early_for = generation
        self.table.event(j, "early-init-fallback", f"launch {generation}: early start called "
                         f"off: {why}; the donor(s) give their slots up as decided and the job "
                         "starts normally once they are free")
