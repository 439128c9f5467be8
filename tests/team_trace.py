"""A duration-based trace with a team column, written for the queue tests (read with
`--columns submit=submit_time,gpus=num_gpus,duration=duration,queue=team`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

COLUMNS = "submit=submit_time,gpus=num_gpus,duration=duration,queue=team"


def write_team_trace(tmp_path: Path, jobs: Iterable[tuple[str, float, int, float, str]]) -> Path:
    """`trace.csv` under `tmp_path`, one row per (job id, submit s, GPUs, duration s, team)."""
    rows = ["job_id,submit_time,num_gpus,duration,team"]
    rows += [f"{name},{t:g},{gpus},{d:g},{team}" for name, t, gpus, d, team in jobs]
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(rows) + "\n")
    return path
