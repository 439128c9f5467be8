"""Workloads: the jobs a simulation submits, loaded from files or generated.

Sources: Pollux-artifact workload CSVs (`load_pollux_csv`), Tiresias traces
(`load_tiresias_csv`), Gavel's `.trace` files (`load_gavel_trace`, by extension), windows of the Philly-derived trace (`load_philly`), Poisson synthetic
workloads (`synthetic`) and the built-in default (`builtin_default`). `load_workload` picks the
loader from a file's header; `load_workloads` also expands directories. Every loader takes the
application catalog of the ground truth in use (`{app: AppLimits}`) and raises a one-line
`InputError` naming the file and row on bad input.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from corral.core.errors import InputError
from corral.sim.truth.base import AppLimits
from corral.sim.workloads.builtin import builtin_default
from corral.sim.workloads.columns import (
    ITP_COLUMNS,
    ITP_HEADER,
    ITP_MODEL_MAP,
    load_columns,
    load_itp,
    parse_columns,
    parse_model_map,
)
from corral.sim.workloads.common import (
    SIZE_CLASS_APPS,
    TUNED_GPUS,
    Workload,
    default_gpu_choices,
    max_sensible_gpus,
    read_header,
    size_class,
    tuned_config,
)
from corral.sim.workloads.describe import describe_workload, format_description
from corral.sim.workloads.gavel_trace import load_gavel_trace
from corral.sim.workloads.philly import PHILLY_COLUMNS, PHILLY_QUEUE_COLUMN, load_philly
from corral.sim.workloads.pollux_csv import POLLUX_COLUMNS, load_pollux_csv
from corral.sim.workloads.synthetic import POLLUX_MIX, synthetic
from corral.sim.workloads.tiresias_csv import TIRESIAS_COLUMNS, load_tiresias_csv
from corral.sim.workloads.window import DEFAULT_PHILLY_HOURS, Window, apply_window

__all__ = [
    "POLLUX_MIX", "SIZE_CLASS_APPS", "TUNED_GPUS", "Workload", "builtin_default",
    "default_gpu_choices", "describe_workload", "format_description", "load_philly",
    "load_pollux_csv", "load_tiresias_csv", "load_workload", "load_workloads",
    "max_sensible_gpus", "natural_key", "size_class", "synthetic", "tuned_config", "Window",
    "apply_window", "ITP_MODEL_MAP", "load_columns", "load_itp", "parse_columns",
    "parse_model_map", "load_gavel_trace", "WORKLOAD_SUFFIXES",
]

#: File name endings a directory of workloads is read for.
WORKLOAD_SUFFIXES: tuple[str, ...] = (".csv", ".trace")

_FORMATS: tuple[tuple[str, Sequence[str], Callable[..., Workload]], ...] = (
    ("Pollux", POLLUX_COLUMNS, load_pollux_csv),
    ("Tiresias", TIRESIAS_COLUMNS, load_tiresias_csv),
    ("Philly", PHILLY_COLUMNS, load_philly),
    ("ITP", ITP_HEADER, load_itp),
    ("columns", ("job_id", "submit_time", "num_gpus", "duration"), load_columns),
)


def load_workload(path: str | os.PathLike[str], apps: Mapping[str, AppLimits], *,
                  seed: int = 0, window: Window | None = None,
                  columns: Mapping[str, str] | None = None,
                  model_map: Mapping[str, str] | None = None) -> Workload:
    """Load one workload file, choosing the format from its header columns (a `.trace` file
    is Gavel's format, which has none: `load_gavel_trace`).

    Pollux (`name,time,application,...`), Tiresias (`job_id,num_gpu,submit_time,...`), Philly
    (`timestamp,duration,num_gpus,gpu_time`), ITP/ElasticFlow (`job_id,submission_time,...`) or the
    generic duration-based one (`corral.sim.workloads.columns`); `columns` ({role: column}) reads
    any CSV the generic way. `model_map` applies to ITP and generic files; `window` picks the
    stretch (`corral.sim.workloads.window`); `seed` drives the size-class mapping.
    """
    path = Path(path)
    if path.suffix == ".trace":  # Gavel's format: no header, tab-separated
        return apply_window(load_gavel_trace(path, apps), window)
    queue_column = (columns or {}).get("queue")
    if columns and set(columns) != {"queue"}:
        return apply_window(load_columns(path, apps, columns=columns, model_map=model_map,
                                         seed=seed), window)
    header = set(read_header(path))
    best = max(_FORMATS, key=lambda f: len(header & set(f[1])))
    overlap = len(header & set(best[1]))
    if overlap < 2:
        expected = "; ".join(f"{n}: {','.join(cols)}" for n, cols, _ in _FORMATS)
        raise InputError(f"{path}: row 1: unrecognized workload header "
                         f"({','.join(sorted(header))}); expected the columns of {expected}")
    loader = best[2]
    if loader is load_philly:
        tenant = queue_column or PHILLY_QUEUE_COLUMN
        if window is None:
            return load_philly(path, apps, seed=seed, hours=DEFAULT_PHILLY_HOURS,
                               queue_column=tenant)
        return load_philly(path, apps, seed=seed, start=window.start or "0", hours=window.hours,
                           queue_column=tenant)
    if queue_column is not None and loader is not load_columns:  # only the tenant column
        if loader is load_itp:
            itp_map = {k: v for k, v in ITP_MODEL_MAP.items() if v in apps}
            read = {**ITP_COLUMNS, **(columns or {})}
            return apply_window(load_columns(path, apps, columns=read,
                                             model_map={**itp_map, **(model_map or {})},
                                             seed=seed, kind="itp"), window)
        raise InputError(f"{path}: --columns queue={queue_column} applies to Philly and "
                         f"duration-based traces, not to a {best[0]} workload")
    if loader is load_columns and queue_column is not None:
        return apply_window(load_columns(path, apps, columns=columns, model_map=model_map,
                                         seed=seed), window)
    if loader is load_pollux_csv:
        return apply_window(load_pollux_csv(path, apps), window)
    if loader in (load_itp, load_columns):
        return apply_window(loader(path, apps, seed=seed, model_map=model_map), window)
    # missing columns are reported by the loader
    return apply_window(loader(path, apps, seed=seed), window)


def natural_key(text: str) -> list[object]:
    """Sort key that orders embedded numbers numerically (workload-2 before workload-10)."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t.lower())
            for t in re.split(r"(\d+)", text) if t]


def load_workloads(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
                   apps: Mapping[str, AppLimits], *, seed: int = 0,
                   window: Window | None = None, columns: Mapping[str, str] | None = None,
                   model_map: Mapping[str, str] | None = None) -> list[Workload]:
    """Load several workload files in the given order (each through `window`); a directory
    stands for every `*.csv` and `*.trace` in it, in natural order."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[Workload] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files = sorted((f for f in p.iterdir() if f.suffix in WORKLOAD_SUFFIXES and f.is_file()),
                           key=lambda f: natural_key(f.name))
            if not files:
                raise InputError(f"{p}: directory has no *.csv or *.trace workload files")
            out.extend(load_workload(f, apps, seed=seed, window=window, columns=columns,
                                     model_map=model_map) for f in files)
        else:
            out.append(load_workload(p, apps, seed=seed, window=window, columns=columns,
                                     model_map=model_map))
    if not out:
        raise InputError("no workload files given")
    return out
