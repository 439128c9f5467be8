"""Load a Pollux-artifact workload CSV: `name,time,application,num_replicas,batch_size`.

An optional `gpu_type` column restricts a job to one GPU type (`JobSpec.gpu_type`; an empty
cell: any type), for clusters of several types (`--cluster k80:6x4,v100:2x8`).

Each row is one job submitted at second `time`, running `application` with the user's tuned
fixed configuration (`num_replicas` GPUs, total `batch_size`). The job's batch-size limits,
epochs and learning-rate rule come from the application catalog (`apps`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from corral.core.cluster import gpu_type_problem
from corral.sim.truth.base import AppLimits
from corral.sim.workloads.common import (
    Workload,
    check_unique,
    lookup_app,
    make_job,
    parse_number,
    read_table,
)

POLLUX_COLUMNS: tuple[str, ...] = ("name", "time", "application", "num_replicas", "batch_size")


def load_pollux_csv(path: str | Path, apps: Mapping[str, AppLimits]) -> Workload:
    """Read a Pollux workload file; bad input raises a one-line `InputError` naming the row."""
    table = read_table(path, POLLUX_COLUMNS, "Pollux")
    c_name, c_app = table.col["name"], table.col["application"]
    c_type = table.col.get("gpu_type")
    seen: dict[str, int] = {}
    jobs = []
    for i, row in enumerate(table.rows):
        name = row[c_name].strip()
        check_unique(table, i, name, seen, "job name")
        submit = parse_number(table, i, "time")
        app = row[c_app].strip()
        limits = lookup_app(table, i, app, apps)
        gpus = parse_number(table, i, "num_replicas", integer=True, minimum=1)
        batch = parse_number(table, i, "batch_size", integer=True, minimum=1)
        spec = make_job(name, submit, app, limits, int(gpus), int(batch),
                        where=f"{table.path}: row {table.lines[i]}")
        if c_type is not None and (gpu_type := row[c_type].strip()):
            if problem := gpu_type_problem(gpu_type):
                raise table.error(i, f"column gpu_type: {problem}")
            spec = dataclasses.replace(spec, gpu_type=gpu_type)
        jobs.append(spec)
    return Workload(table.path.stem, jobs, source=f"pollux:{table.path}")
