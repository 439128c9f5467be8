"""Load one of Gavel's `.trace` files: its jobs, with Gavel's throughput table as their truth.

Gavel's physical-cluster traces (Gavel (OSDI'20); stanford-futuredata/gavel, MIT) are
tab-separated lines, one job each (`load_gavel_trace` names the columns). The jobs' application
is their Gavel job type, answered by `corral.sim.truth.gavel.GavelTruth` from
`simulation_throughputs.json` (`find_throughputs`): the workload names it (`Workload.truth`).
Each job trains at a fixed total batch on exactly `scale_factor` GPUs, as in Gavel, for
`total_steps` iterations: a duration-based job (`corral.sim.truth.scaled`) of `total_steps /
throughput` on `scale_factor` GPUs of one server of the application's own GPU type.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from corral.core.errors import InputError
from corral.core.jobs import JobSpec
from corral.sim.truth.base import AppLimits
from corral.sim.truth.source import TruthSource
from corral.sim.workloads.common import Workload

GAVEL_FIELDS: tuple[str, ...] = (
    "job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir", "total_steps",
    "scale_factor", "priority_weight", "SLO", "arrival_time")

THROUGHPUTS_NAME = "simulation_throughputs.json"


def find_throughputs(trace: Path) -> Path:
    """Gavel's throughput file for `trace`: beside it or one folder up."""
    places = [trace.parent / THROUGHPUTS_NAME, trace.parent.parent / THROUGHPUTS_NAME]
    for p in places:
        if p.is_file():
            return p
    raise InputError(f"{trace}: Gavel trace needs Gavel's {THROUGHPUTS_NAME}, not found in "
                     f"{' or '.join(str(p.parent) for p in places)}")


def load_gavel_trace(path: str | Path, apps: Mapping[str, AppLimits] | None = None, *,
                     throughputs: str | Path | None = None) -> Workload:
    """Read a Gavel trace; bad input raises a one-line `InputError` naming the file and line.

    Columns, no header: `job_type, command, working_directory, num_steps_arg, needs_data_dir,
    total_steps, scale_factor, priority_weight, SLO, arrival_time`: a job of `job_type` running
    `total_steps` iterations on `scale_factor` GPUs (`min_gpus` = `max_gpus`, total batch
    `scale_factor` x the type's batch), submitted at `arrival_time` s; the other columns are
    Gavel's own. `apps` (the truth in use) is not consulted: the jobs' truth is Gavel's table."""
    from corral.sim.truth.gavel import GavelApp

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    table = Path(throughputs) if throughputs is not None else find_throughputs(path)
    source = TruthSource(gavel=str(table.resolve()))
    truth = source.load()
    jobs: list[JobSpec] = []
    with path.open() as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            cells = line.rstrip("\r\n").split("\t")
            where = f"{path}:{lineno}"
            if len(cells) != len(GAVEL_FIELDS):
                raise InputError(f"{where}: expected {len(GAVEL_FIELDS)} tab-separated fields "
                                 f"({', '.join(GAVEL_FIELDS)}), got {len(cells)}")
            job_type = cells[0].strip()
            if job_type not in truth.apps():
                raise InputError(f"{where}: job type {job_type!r} has no single-GPU throughput in {table}")
            try:
                steps = int(cells[5])
                gpus = int(cells[6])
                arrival = float(cells[9])
            except ValueError:
                raise InputError(f"{where}: total_steps and scale_factor must be integers and "
                                 f"arrival_time a number, got {cells[5]!r}, {cells[6]!r}, {cells[9]!r}") from None
            if steps < 1 or gpus < 1 or not arrival >= 0:
                raise InputError(f"{where}: need total_steps >= 1, scale_factor >= 1 and "
                                 f"arrival_time >= 0, got {steps}, {gpus}, {arrival}")
            app = truth.app(job_type)
            assert isinstance(app, GavelApp)
            batch = app.bsz * gpus
            jobs.append(JobSpec(
                name=f"{path.stem}-{len(jobs)}", submit_time_s=arrival, app=job_type, gpus=gpus,
                batch_size=batch, init_bsz=batch, max_bsz=batch, min_local_bsz=1,
                max_local_bsz=app.bsz, min_gpus=gpus, max_gpus=gpus, adaptive=False, lr_rule=app.limits.lr_rule, epochs=1,
                trace_duration_s=steps / app.throughput(gpus)))
    if not jobs:
        raise InputError(f"{path}: no jobs")
    columns = {"job_type": "application (Gavel job type)", "total_steps": "work, in iterations",
               "scale_factor": "GPUs", "arrival_time": "submit time (s)",
               "command, working_directory, num_steps_arg, needs_data_dir, priority_weight, SLO": "not used"}
    return Workload(path.stem, jobs, source=f"gavel:{path}", columns=columns, truth=source)
