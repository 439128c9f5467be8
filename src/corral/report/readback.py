"""Read a `corral simulate --out DIR` folder back: the summary document and the runs.

`read_outputs(DIR)` parses summary.json and jobs.csv (and, when present, gpu_timeline.csv and
allocations.csv) into the same `SimResult` objects the simulation produced, so the plots and
the HTML report are drawn by one code path whether they follow a simulation or
`corral report DIR` rebuilds them later. A job's fair-share JCT comes back from its JCT and
finish-time fairness (ftf = jct / fair-share JCT). A run whose timelines were not written
has empty ones, and its report says so instead of drawing them.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.core.errors import InputError
from corral.report.files import (
    ALLOCATIONS_CSV_COLUMNS,
    GPU_TIMELINE_COLUMNS,
    JOBS_CSV_COLUMNS,
    SCHEMA_VERSION,
    WAIT_COLUMNS,
)
from corral.sim.loop.results import JobRecord, SimResult

#: The jobs.csv columns a folder must have (the waits by reason came later: optional).
_REQUIRED = tuple(c for c in JOBS_CSV_COLUMNS if c not in WAIT_COLUMNS.values())

__all__ = ["Outputs", "read_outputs"]


@dataclass
class Outputs:
    """What a results folder holds: summary.json as parsed, and the runs per policy in its
    order (workload keys as in summary.json)."""

    summary: dict[str, Any]
    results: dict[str, list[SimResult]]
    has_timelines: bool
    has_allocations: bool


def _num(text: str) -> float | None:
    return None if text == "" else float(text)


def _rows(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise InputError(f"{path}: missing column(s) {', '.join(missing)}")
            return list(reader)
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a CSV file ({exc})") from None


def _waited(row: dict[str, str]) -> dict[str, float]:
    """A row's seconds waited per reason kind (none in a folder written before they were)."""
    waited = {kind.value: float(row.get(column) or 0.0) for kind, column in WAIT_COLUMNS.items()}
    return {kind: s for kind, s in waited.items() if s}


def _job(row: dict[str, str], line: int, path: Path) -> JobRecord:
    try:
        jct, ftf = _num(row["jct_s"]), _num(row["ftf"])
        return JobRecord(
            name=row["name"], app=row["app"], submit_s=float(row["submit_s"]),
            requested_gpus=int(row["requested_gpus"]), first_start_s=_num(row["first_start_s"]),
            finish_s=_num(row["finish_s"]), restarts=int(row["restarts"]),
            attained_gpu_s=float(row["attained_gpu_s"] or 0.0),
            isolated_jct_s=_num(row["isolated_jct_s"]),
            fair_share_jct_s=jct / ftf if jct is not None and ftf else None,
            gpu_s_by_type={t: float(v) for t, _, v in (
                part.partition("=") for part in (row.get("gpu_s_by_type") or "").split(";")
                if part)},
            waited_by_reason=_waited(row))
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path}, row {line}: {exc}") from None


def read_outputs(out_dir: str | Path) -> Outputs:
    """Parse a results folder; a missing or malformed summary.json or jobs.csv is an
    InputError naming the file (and row)."""
    out = Path(out_dir)
    summary_path = out / "summary.json"
    try:
        summary = json.loads(summary_path.read_text())
    except OSError as exc:
        raise InputError(f"{summary_path}: {exc.strerror or exc} (is {out} a `corral simulate "
                         "--out` folder?)") from None
    except ValueError as exc:
        raise InputError(f"{summary_path}: not JSON ({exc})") from None
    if not isinstance(summary, dict) or summary.get("schema") != SCHEMA_VERSION or \
            not isinstance(summary.get("policies"), dict):
        raise InputError(f"{summary_path}: not a corral summary (schema {SCHEMA_VERSION})")

    runs: dict[tuple[str, str], SimResult] = {}
    for policy, doc in summary["policies"].items():
        for key in (doc.get("workloads") or {}):
            runs[(policy, key)] = SimResult(policy=policy, workload=key, cluster_gpus=0, jobs=[])
    jobs_path = out / "jobs.csv"
    for line, row in enumerate(_rows(jobs_path, _REQUIRED), start=2):
        run = runs.get((row["policy"], row["workload"]))
        if run is None:
            raise InputError(f"{jobs_path}, row {line}: policy {row['policy']!r} on workload "
                             f"{row['workload']!r} is not in summary.json")
        run.jobs.append(_job(row, line, jobs_path))

    timeline_path, alloc_path = out / "gpu_timeline.csv", out / "allocations.csv"
    has_timelines = timeline_path.is_file()
    if has_timelines:
        for line, row in enumerate(_rows(timeline_path, GPU_TIMELINE_COLUMNS), start=2):
            run = runs.get((row["policy"], row["workload"]))
            if run is not None:
                try:
                    run.gpu_timeline.append((float(row["time_s"]), int(row["gpus"])))
                    run.cluster_gpus = int(row["cluster_gpus"])
                except ValueError as exc:
                    raise InputError(f"{timeline_path}, row {line}: {exc}") from None
    has_allocations = False
    if alloc_path.is_file():
        for line, row in enumerate(_rows(alloc_path, ALLOCATIONS_CSV_COLUMNS), start=2):
            run = runs.get((row["policy"], row["workload"]))
            if run is not None:
                try:
                    point = (float(row["time_s"]), int(row["gpus"]))
                except ValueError as exc:
                    raise InputError(f"{alloc_path}, row {line}: {exc}") from None
                run.allocations.setdefault(row["job"], []).append(point)
                has_allocations = True

    results: dict[str, list[SimResult]] = {}
    for (policy, _), run in runs.items():
        results.setdefault(policy, []).append(run)
    return Outputs(summary, results, has_timelines, has_allocations)
