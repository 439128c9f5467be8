"""`Backend`: what a backend that runs commands implements, and nothing else.

The job table (`JobTable`, corral.executors.lifecycle) is the one executor the control loop
calls for such backends; it keeps each job's record and its lifecycle, and asks its backend only
where workers can go and how a worker set starts, is watched, signalled and ended. The local
backend (corral.executors.local: processes on this machine) and the Ray one
(corral.executors.ray.executor: actors) implement it; early starts and in-place resizes are
separate parts, given to the table beside it (corral.executors.early, corral.executors.resize).
Every method is called with the table's lock held, but `refresh`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

from corral.core.cluster import Cluster
from corral.executors.base import WorkerPlan

__all__ = ["Backend", "Polled"]

J_contra = TypeVar("J_contra", contravariant=True)  # the table's job record


class Polled(NamedTuple):
    """A started worker set as one look saw it: each rank's exit status (None: running) and
    the target it was started for (a set that no longer runs its job's target is resized)."""

    codes: Sequence[int | None]
    target: Any


class Backend(Protocol[J_contra]):
    """Where workers can go (`cluster`, `target`, `refresh`) and a job's worker set (`start`,
    `poll`, `workers`, `signal`, `release`, `reclaim`)."""

    def cluster(self) -> Cluster:
        """The slots it can hand out, as nodes."""

    def target(self, job_id: str, plan: WorkerPlan) -> Any:
        """`plan` in the backend's terms, the job's target (ValueError: it cannot run here)."""

    def refresh(self) -> None:
        """Re-read what may change outside (Ray's nodes), before each background pass; called
        without the lock."""

    def start(self, j: J_contra) -> None:
        """Start a launch of queued job `j` on `j.target` if its slots are free (else leave it
        queued: asked again next pass)."""

    def poll(self, j: J_contra) -> Polled | None:
        """Move `j`'s worker set on; what it shows once started (None: no set, or one still
        starting, which the backend moves on or hands back to the table itself)."""

    def workers(self, j: J_contra) -> tuple[str, ...] | None:
        """Ids of `j`'s running workers; None when it has no worker set (being started,
        running or stopping)."""

    def signal(self, j: J_contra, signum: int) -> None:
        """Send `signum` to `j`'s running workers (SIGKILL again, at a later escalation step,
        may force harder: Ray kills their actors)."""

    def release(self, j: J_contra) -> list[int] | None:
        """End what is left of `j`'s worker set and free its slots; the exit statuses of the
        set that had started (None: none had)."""

    def reclaim(self, job_id: str, workers: Sequence[str]) -> None:
        """Stop workers a previous service left running for `job_id` (checkpointing first);
        blocks until they are gone, bounded by the stop timeout."""
