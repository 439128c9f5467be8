"""The job's report to the scheduler: progress plus fitted models (Pollux (OSDI'21) §4.1).

Rank 0 of a `corral.train` job rewrites one JSON file atomically every report interval, after
each launch's first step, at epoch ends and on stop/finish; the executor reads it (SideCar
(SC'20) §III-B-4's monitoring report). Keys: time (Unix s), state (running|stopped|finished),
launch, world_size, num_nodes, batch [local_bsz, accum_steps], total_bsz, steps, epoch,
progress (scale-invariant iterations), samples, loss (mean over the interval), lr_scale,
metrics [[steps, epoch, value]], estimator (`JobEstimator.to_dict()`), resumed (the checkpoint
this launch started from, or null), first_step_time. Torch-free.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from corral.protocol.files import atomic_write_json, read_json

__all__ = ["Reporter", "read_report", "REPORT_FILE"]

REPORT_FILE = "report.json"


class Reporter:
    """Writes the report when due (rank 0 only); a no-op without a path."""

    def __init__(self, path: str | Path | None, interval_s: float) -> None:
        self.path = Path(path) if path else None
        self.interval_s = interval_s
        self._last = -float("inf")

    def due(self, now: float | None = None) -> bool:
        if self.path is None:
            return False
        return (time.monotonic() if now is None else now) - self._last >= self.interval_s

    def write(self, doc: dict[str, Any]) -> None:
        """Replace the report atomically but not durably: it is written on the training
        thread every few seconds, and the next one replaces it anyway, so a machine crash
        may lose the last one (the checkpoints are what a restart resumes from), while two
        fsyncs a report can cost tens of ms on a slow or shared disk."""
        if self.path is None:
            return
        self._last = time.monotonic()
        atomic_write_json(self.path, {"time": time.time(), **doc}, durable=False)


def read_report(path: str | Path) -> dict[str, Any] | None:
    """The latest report in `path`, or None when there is none (yet)."""
    doc = read_json(path)
    return doc if isinstance(doc, dict) else None
