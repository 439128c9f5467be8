"""Build a workload from a window of the Philly-derived trace (`timestamp,duration,num_gpus,gpu_time,cluster`).

As the Pollux workloads were built (OSDI'21 §5.1): jobs under 60 s or of 1000 GPU-hours or
more are dropped, jobs submitted in the window kept, each mapped by its GPU-time to an
application of its size class (`map_size_classes`, seeded, in submit order), keeping its GPU
count (capped) with `tuned_config`'s batch; submit times count from the window start. The
window is contiguous (the artifact pooled the same hours over all days); `start=None` picks the
busiest. A job's queue (team) is its virtual cluster, the `cluster` column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np

from corral.core.errors import InputError
from corral.sim.truth.base import AppLimits
from corral.sim.workloads.common import (
    Table,
    Workload,
    make_job,
    map_size_classes,
    parse_number,
    read_table,
    tuned_config,
)

PHILLY_COLUMNS: tuple[str, ...] = ("timestamp", "duration", "num_gpus", "gpu_time")
#: The column naming a job's virtual cluster (its team): the job's queue, when present.
PHILLY_QUEUE_COLUMN = "cluster"
MIN_DURATION_S = 60.0
MAX_GPU_S = 1000 * 3600.0


def _floats(table: Table, column: str, *, integer: bool = False, minimum: float = 0.0) -> np.ndarray:
    """A numeric column; on any bad value, the first bad row gives the InputError."""
    values = table.column(column)
    try:
        arr = np.array(values, dtype=float)
    except ValueError:
        arr = None
    if arr is not None:
        bad = ~np.isfinite(arr) | (arr < minimum)
        if integer:
            bad |= arr != np.round(arr)
        if not bad.any():
            return arr
    for i in range(len(values)):  # slow path, only to name the offending row
        parse_number(table, i, column, integer=integer, minimum=minimum)
    raise AssertionError("unreachable")  # pragma: no cover


def _timestamps(table: Table) -> np.ndarray:
    """Seconds since the epoch of every row's `timestamp`."""
    values = table.column("timestamp")
    try:
        ts = np.array(values, dtype="datetime64[s]")
    except ValueError:
        ts = None
    if ts is not None and not np.isnat(ts).any():
        return ts.astype(np.int64).astype(float)
    for i, text in enumerate(values):
        try:
            if np.isnat(np.datetime64(text.strip(), "s")):
                raise ValueError
        except ValueError:
            raise table.error(i, f"timestamp is not a date and time (YYYY-MM-DD HH:MM:SS): "
                                 f"{text!r}") from None
    raise AssertionError("unreachable")  # pragma: no cover


def _iso(seconds: float) -> str:
    return str(np.datetime64(int(seconds), "s")).replace("T", " ")


def _window_start(path: Path, start: str | float | None, t_all: np.ndarray,
                  t_kept: np.ndarray, span: float) -> float:
    if start is None:
        if len(t_kept) == 0:
            raise InputError(f"{path}: no job is at least {MIN_DURATION_S:g} s long and under "
                             f"{MAX_GPU_S / 3600:g} GPU-hours")
        # Busiest window: it can always start at a job's submit time; count jobs in
        # [t_i, t_i + span) for every i with one binary search over the sorted times.
        ends = np.searchsorted(t_kept, t_kept + span, side="left")
        counts = ends - np.arange(len(t_kept))
        return float(t_kept[int(np.argmax(counts))])  # earliest of equally busy windows
    if isinstance(start, str):
        try:
            return float(t_all.min()) + float(start)
        except ValueError:
            pass
        try:
            when: np.datetime64 = np.datetime64(start.strip(), "s")
        except ValueError:
            when = np.datetime64("NaT")
        if np.isnat(when):
            raise InputError(f"{path}: window start {start!r} is neither a timestamp "
                             f"(YYYY-MM-DD HH:MM:SS) nor seconds from the first one")
        return float(when.astype(np.int64))
    value = float(start)
    if not np.isfinite(value):
        raise InputError(f"{path}: window start must be finite, got {start!r}")
    return float(t_all.min()) + value


def load_philly(path: str | Path, apps: Mapping[str, AppLimits], *,
                start: str | float | None = None, hours: float | None = 8.0,
                max_jobs: int | None = None, seed: int = 0,
                queue_column: str | None = PHILLY_QUEUE_COLUMN) -> Workload:
    """Jobs of the trace window `[start, start + hours)` mapped to catalog applications.

    `start`: a timestamp string (`2017-10-09 07:00:00`), seconds from the earliest timestamp of
    the file (a number or numeric string), or None for the window with the most jobs after
    filtering. `hours=None`: to the end of the trace (with `start=0`, the whole trace).
    `max_jobs` keeps only the first jobs of the window. `queue_column` (default: the virtual
    cluster, `cluster`) gives each job its queue when the file has it; naming a column the file
    lacks is an error. See the module docstring.
    """
    if hours is not None and not (isinstance(hours, (int, float)) and np.isfinite(hours)
                                  and hours > 0):
        raise InputError(f"{path}: window length must be a positive number of hours, got {hours!r}")
    if max_jobs is not None and max_jobs < 1:
        raise InputError(f"{path}: max_jobs must be >= 1, got {max_jobs}")
    needed = PHILLY_COLUMNS
    if queue_column is not None and queue_column != PHILLY_QUEUE_COLUMN:
        needed = (*PHILLY_COLUMNS, queue_column)
    table = read_table(path, needed, "Philly")
    tenant = (table.column(queue_column) if queue_column is not None and queue_column in table.col
              else None)
    t_all = _timestamps(table)
    duration = _floats(table, "duration")
    gpus = _floats(table, "num_gpus", integer=True, minimum=1)
    gpu_s = _floats(table, "gpu_time")

    kept = np.flatnonzero((duration >= MIN_DURATION_S) & (gpu_s < MAX_GPU_S))
    kept = kept[np.argsort(t_all[kept], kind="stable")]
    t_kept = t_all[kept]
    if hours is None:
        if start is None:
            raise InputError(f"{path}: a window to the end of the trace needs a start")
        span = np.inf
    else:
        span = float(hours) * 3600.0
    w0 = _window_start(table.path, start, t_all, t_kept, span)
    lo, hi = np.searchsorted(t_kept, [w0, w0 + span], side="left")
    window = kept[lo:hi]
    length = "end" if hours is None else f"+{hours:g} h"
    if len(window) == 0:
        raise InputError(
            f"{table.path}: no jobs in the window [{_iso(w0)}, {length}) after dropping jobs "
            f"under {MIN_DURATION_S:g} s or over {MAX_GPU_S / 3600:g} GPU-hours; the trace spans "
            f"{_iso(t_all.min())} to {_iso(t_all.max())}")
    if max_jobs is not None:
        window = window[:max_jobs]

    chosen = map_size_classes(gpu_s[window], apps, seed, str(table.path))
    submits = (t_all[window] - w0).tolist()
    jobs = []
    trace: dict[str, float] = {}
    for k, (i, app, submit) in enumerate(zip(window.tolist(), chosen, submits)):
        limits = apps[app]
        g, batch = tuned_config(limits, int(gpus[i]))
        name = f"{app}-{k}"
        spec = make_job(name, submit, app, limits, g, batch,
                        where=f"{table.path}: row {table.lines[i]}")
        if tenant is not None and tenant[i].strip():
            spec = replace(spec, queue=tenant[i].strip())
        jobs.append(spec)
        trace[name] = float(gpu_s[i])
    stamp = _iso(w0).replace(" ", "T")
    return Workload(
        f"philly-{stamp}-{'end' if hours is None else f'{hours:g}h'}", jobs,
        source=f"philly:{table.path} window [{_iso(w0)}, {length}) seed {seed}",
        trace_gpu_s=trace)
