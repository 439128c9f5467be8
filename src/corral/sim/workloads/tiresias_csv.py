"""Load a Tiresias-simulator trace: `job_id,num_gpu,submit_time,iterations,model_name,duration,interval`.

Tiresias' model names are not catalog applications, so each job gets one of the GPU-time size
class of `duration x num_gpu` (`map_size_classes`, seeded, one draw per row in file order),
keeps its `num_gpu` (capped) and gets `tuned_config`'s batch. `iterations`, `model_name` and
`interval` are not used. Jobs are named `<app>-<job_id>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from corral.sim.truth.base import AppLimits
from corral.sim.workloads.common import (
    Workload,
    check_unique,
    make_job,
    map_size_classes,
    parse_number,
    read_table,
    tuned_config,
)

TIRESIAS_COLUMNS: tuple[str, ...] = ("job_id", "num_gpu", "submit_time", "duration")


def load_tiresias_csv(path: str | Path, apps: Mapping[str, AppLimits], *,
                      seed: int = 0) -> Workload:
    """Read a Tiresias trace, mapping each job to a catalog application (see module docstring)."""
    table = read_table(path, TIRESIAS_COLUMNS, "Tiresias")
    c_id = table.col["job_id"]
    seen: dict[str, int] = {}
    parsed: list[tuple[str, float, int, float]] = []
    for i, row in enumerate(table.rows):
        job_id = row[c_id].strip()
        check_unique(table, i, job_id, seen, "job_id")
        gpus = int(parse_number(table, i, "num_gpu", integer=True, minimum=1))
        submit = parse_number(table, i, "submit_time")
        duration = parse_number(table, i, "duration")
        parsed.append((job_id, submit, gpus, duration * gpus))
    gpu_s = np.array([p[3] for p in parsed], dtype=float)
    chosen = map_size_classes(gpu_s, apps, seed, str(table.path))
    jobs = []
    trace: dict[str, float] = {}
    for i, ((job_id, submit, gpus, gs), app) in enumerate(zip(parsed, chosen)):
        limits = apps[app]
        g, batch = tuned_config(limits, gpus)
        name = f"{app}-{job_id}"
        jobs.append(make_job(name, submit, app, limits, g, batch,
                             where=f"{table.path}: row {table.lines[i]}"))
        trace[name] = gs
    return Workload(table.path.stem, jobs, source=f"tiresias:{table.path} (seed {seed})",
                    trace_gpu_s=trace)
