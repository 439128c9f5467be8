"""`KnownApps`: the submission check of the emulated executor: a job's model must be one its
truth knows (its command is never run, so the model is all there is to run)."""

from __future__ import annotations

from corral.core.errors import InputError
from corral.sim.truth.base import Truth

__all__ = ["KnownApps"]


class KnownApps:
    """Called with a submission's `app` (None: it named none): InputError (one line) unless
    the truth knows it. The service checks each submission with it; the executor each job."""

    def __init__(self, truth: Truth) -> None:
        self.truth = truth

    def __call__(self, app: str | None) -> None:
        known = sorted(self.truth.apps())
        if not app:
            raise InputError("the emulated executor needs the job's model: set `app` to one of "
                             + ", ".join(known))
        if app not in known:
            raise InputError(f"unknown app {app!r} for the emulated executor "
                             f"({self.truth.source}); known: {', '.join(known)}")
