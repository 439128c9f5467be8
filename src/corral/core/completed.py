"""The jobs that finished since a policy last looked: the new tail of `Snapshot.completed`.

The engine's and the service's lists of finished jobs only grow, so a policy that learns from
them (corral's lengths and rates, the queue layer's per-queue history) reads only what was added
since its last round: linear in the jobs that left, not in every job finished so far on a
months-long trace. A list that does not extend the last one read (another run, a restarted
service) is read from its start again, and the reader says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.jobs import JobView

__all__ = ["NewlyCompleted"]


class NewlyCompleted:
    """Remembers how far into the finished-jobs list the last `read` got, and its last job."""

    def __init__(self) -> None:
        self._count = 0
        self._last: JobView | None = None

    def read(self, completed: Sequence[JobView]) -> tuple[Sequence[JobView], bool]:
        """The finished jobs added since the last call, and whether the list was read from its
        start again (it does not extend the last one read: what was taken from it is stale)."""
        count = self._count
        extends = 0 < count <= len(completed) and completed[count - 1] is self._last
        self._count = len(completed)
        self._last = completed[-1] if completed else None
        return (completed[count:], False) if extends else (completed, count > 0)
