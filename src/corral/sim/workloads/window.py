"""Which stretch of a trace to simulate: `--window all`, `--window START:HOURS`, or the default.

Every trace format with submission times takes a window. `all` is the whole trace; `START:HOURS`
keeps the jobs submitted in `[START, START + HOURS h)`, START being seconds from the trace's
first submission or, for the Philly trace, also a timestamp (`2017-10-09 07:00:00:24`: the part
after the last colon is the length). Without a window, the Philly trace runs its busiest 8-hour
window (the Pollux workloads' construction) and the other formats run whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from corral.core.errors import InputError
from corral.sim.workloads.common import Workload

#: Length of the Philly trace's default (busiest) window, hours.
DEFAULT_PHILLY_HOURS = 8.0


@dataclass(frozen=True, slots=True)
class Window:
    """A stretch of a trace. `start=None`: from its first submission; `hours=None`: to its end."""

    start: str | None = None
    hours: float | None = None

    @property
    def whole(self) -> bool:
        return self.start is None and self.hours is None

    @classmethod
    def parse(cls, text: str) -> Window:
        """`all`, or `START:HOURS` with START seconds from the first submission or a timestamp."""
        text = text.strip()
        if text.lower() == "all":
            return cls()
        start, sep, hours = text.rpartition(":")
        try:
            length = float(hours)
        except ValueError:
            length = math.nan
        if not sep or not start.strip() or not (math.isfinite(length) and length > 0):
            raise InputError(f"--window {text!r}: expected 'all' or START:HOURS (START in seconds "
                             f"from the first submission, or a timestamp; HOURS > 0)")
        return cls(start.strip(), length)

    def start_seconds(self) -> float:
        """START as seconds from the first submission (formats without timestamps)."""
        if self.start is None:
            return 0.0
        try:
            value = float(self.start)
        except ValueError:
            raise InputError(f"--window start {self.start!r}: this trace has no timestamps; give "
                             f"seconds from its first submission") from None
        if not math.isfinite(value):
            raise InputError(f"--window start must be finite, got {self.start!r}")
        return value

    def describe(self) -> str:
        if self.whole:
            return "all"
        return f"{self.start or 0}:{self.hours:g}"


def apply_window(workload: Workload, window: Window | None) -> Workload:
    """The jobs of a loaded trace submitted inside `window`, with times from the window's start.

    For formats whose loader does not select rows itself (Pollux, Tiresias CSVs).
    """
    if window is None or window.whole or not workload.jobs:
        return workload
    first = workload.jobs[0].submit_time_s
    lo = first + window.start_seconds()
    hi = lo + window.hours * 3600.0 if window.hours is not None else math.inf
    jobs = [replace(j, submit_time_s=j.submit_time_s - lo) for j in workload.jobs
            if lo <= j.submit_time_s < hi]
    if not jobs:
        raise InputError(f"{workload.name}: no jobs in the window {window.describe()} (the trace "
                         f"spans {workload.jobs[-1].submit_time_s - first:.0f} s of submissions)")
    trace = ({j.name: workload.trace_gpu_s[j.name] for j in jobs if j.name in workload.trace_gpu_s}
             if workload.trace_gpu_s else None)
    return Workload(f"{workload.name}-{window.describe()}", jobs,
                    source=f"{workload.source}, window {window.describe()}", trace_gpu_s=trace,
                    columns=workload.columns)
