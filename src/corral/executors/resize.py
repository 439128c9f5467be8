"""Resize mechanisms, executor side, named as the simulator names them (corral.sim.loop.mechanism).

* `checkpoint-restart` (any command): every worker checkpoints and exits on SIGTERM, then a new
  set starts from the checkpoint (corral.executors.lifecycle).
* `in-place` (ONES §3.3.1; protocol: corral.protocol.inplace): only when rank 0 is the
  corral.train trainer itself (its report names that pid, so SIGUSR1 reaches its handler). A
  failure falls back to checkpoint-restart with an event; nothing past the last step is lost.
`InPlaceResize` records one resize under way; `ResizeDeadlines` bounds its phases (an executor
parameter: a test on a loaded machine gives its jobs room, so the fallback never stands in for
the path it checks). Early initialisation (corral.executors.early)
moves who holds slots, not the job's size.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Protocol, TypeVar

from corral.executors.base import WorkerPlan
from corral.protocol.env import STOP_EXIT_CODE
from corral.protocol.inplace import LEAVE_EXIT_CODE
from corral.protocol.report import Report

__all__ = ["MECHANISMS", "IN_PLACE", "CHECKPOINT_RESTART", "InPlaceResize", "check_mechanism",
           "runs_corral_train", "regroup_failure", "ResizeTimeline", "InPlaceResizer",
           "ResizeDeadlines", "PID_TIMEOUT_S"]

CHECKPOINT_RESTART = "checkpoint-restart"
IN_PLACE = "in-place"
MECHANISMS = (IN_PLACE, CHECKPOINT_RESTART)
#: Seconds new workers get to start and build their model before the resize falls back.
READY_TIMEOUT_S = 120.0
#: Seconds from the resize request to the first report of the new worker set (the trainer's
#: own regroup timeout, CORRAL_REGROUP_TIMEOUT_S, is 30 s; the rest is room for a busy machine).
SWITCH_TIMEOUT_S = 60.0
#: Seconds rank 0's Ray actor gets to name its command's pid (corral.executors.ray.inplace).
PID_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ResizeDeadlines:
    """How long each phase of an in-place resize may take before it falls back to
    checkpoint-restart: the new workers' start (`ready_s`), the regroup after the request
    (`switch_s`: keep it above the jobs' CORRAL_REGROUP_TIMEOUT_S) and, on Ray, the answer
    naming rank 0's pid (`pid_s`)."""

    ready_s: float = READY_TIMEOUT_S
    switch_s: float = SWITCH_TIMEOUT_S
    pid_s: float = PID_TIMEOUT_S


def check_mechanism(name: str) -> str:
    """`name` if it is a resize mechanism; ValueError naming the choices otherwise."""
    if name not in MECHANISMS:
        raise ValueError(f"unknown resize mechanism {name!r}; choose one of {', '.join(MECHANISMS)}")
    return name


def runs_corral_train(report: Report | None, launch: int, rank0_pid: int) -> bool:
    """The running launch `launch` is a corral.train job whose rank-0 process is `rank0_pid`
    and every rank has its SIGUSR1 handler installed: it has taken a step, or it is the
    process group of an in-place regroup (its old workers had their handlers already, and a
    new worker installs its handler before it says it is ready). A launch that regrouped in
    place has taken no step until its first one in the new group; counting it out sent the
    next resize asked in that second to checkpoint-restart."""
    if report is None or report.launch != launch or report.pid != rank0_pid \
            or report.state != "running":
        return False
    regrouped_as = (report.resumed or {}).get("in_place") or None  # 0: not in place
    return report.first_step_time is not None or regrouped_as == launch


def regroup_failure(old_codes: Sequence[int | None], leaving: Collection[int],
                    joiner_codes: Sequence[int | None]) -> str | None:
    """Why a regroup under way has failed, from the exit statuses so far (None: still running,
    or an old worker with no new rank that left as it should); None when nothing failed."""
    bad = [(rank, c) for rank, c in enumerate(old_codes)
           if c is not None and not (rank in leaving and c == LEAVE_EXIT_CODE)]
    if not bad and all(c is None for c in joiner_codes):
        return None
    if bad and all(c == STOP_EXIT_CODE for _, c in bad):
        return "the old workers gave up the regroup and checkpointed"
    return f"a worker exited during the regroup (old {list(old_codes)}, new {list(joiner_codes)})"


J_contra = TypeVar("J_contra", contravariant=True)  # an executor's job record


class InPlaceResizer(Protocol[J_contra]):
    """What a backend that resizes in place gives the job table (corral.executors.lifecycle),
    which falls back to checkpoint-restart where `begin` declines."""

    def begin(self, j: J_contra) -> bool:
        """Start moving running job `j` to its target in place (its record in `j.resize`), or
        wait for what that needs; False: it cannot be done in place."""

    def advance(self, j: J_contra) -> None:
        """One look at the resize under way (`j.resize`)."""

    def drop(self, j: J_contra) -> None:
        """End the resize's new workers and give back their slots (`j.resize` None)."""


class ResizeTimeline:
    """The phases of an in-place resize and their deadlines, for the executors' records of one
    (which hold `phase`, `started`, `deadline` and `limits`): "joining" (the new workers start)
    until `limits.ready_s` after the start, then "switching" (the request is out) for
    `limits.switch_s`."""

    phase: str
    started: float
    deadline: float
    limits: ResizeDeadlines
    switched: float | None = None  # when the request went out (a class default: not a field)

    def __post_init__(self) -> None:
        if not self.deadline:
            self.deadline = self.started + self.limits.ready_s

    def switch(self) -> None:
        """The request is out: the old workers now regroup."""
        self.phase = "switching"
        self.switched = time.monotonic()
        self.deadline = self.switched + self.limits.switch_s

    def took(self) -> str:
        """How long the resize took, and how much of that the new workers took to be ready
        (the old workers trained through it), for the executor's `resized` event."""
        now = time.monotonic()
        ready = (self.switched or now) - self.started
        return (f"in {now - self.started:.2f} s (mechanism in-place; the old workers trained "
                f"while the new ones started, ready after {ready:.2f} s)")

    def timed_out(self) -> bool:
        return time.monotonic() > self.deadline


@dataclass
class InPlaceResize(ResizeTimeline):
    """One in-place resize under way: from `old_world` workers to `plan`'s, as generation
    `generation` of the job's process group (the launch number of the new worker set)."""

    plan: WorkerPlan
    generation: int
    old_world: int
    port: int
    joiners: list[Any] = field(default_factory=list)  # the new workers' processes (ranks old_world..)
    joiner_logs: list[IO[bytes]] = field(default_factory=list)
    new_slots: list[int] = field(default_factory=list)  # slots taken for the joiners
    started: float = field(default_factory=time.monotonic)
    phase: str = "joining"  # "joining": new workers initialise; "switching": request sent
    deadline: float = 0.0
    limits: ResizeDeadlines = field(default_factory=ResizeDeadlines)

    @property
    def new_world(self) -> int:
        return self.plan.num_workers

    @property
    def joiner_ranks(self) -> set[int]:
        return set(range(self.old_world, self.new_world))

    def ranks(self) -> dict[int, int | None]:
        """Each old rank's new rank: ranks keep their number; the highest leave on a shrink."""
        return {r: (r if r < self.new_world else None) for r in range(self.old_world)}

