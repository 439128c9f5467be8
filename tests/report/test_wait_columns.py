"""jobs.csv's seconds waited per reason (`wait_<kind>_s`): written from the run's records,
read back by `corral report`, and absent columns (an older folder) read as no wait."""

from __future__ import annotations

import csv
from pathlib import Path

from corral.core.reasons import WaitKind
from corral.report.files import JOBS_CSV_COLUMNS, WAIT_COLUMNS, write_jobs_csv
from corral.report.readback import _job
from corral.sim.loop.results import JobRecord, SimResult


def test_jobs_csv_has_a_wait_column_per_reason_kind_read_back_as_written(tmp_path: Path) -> None:
    job = JobRecord("j1", "cifar10", 0.0, 2, first_start_s=90.0, finish_s=200.0,
                    queue_time_s=90.0, waited_by_reason={"arriving": 30.0, "quota": 60.0})
    path = write_jobs_csv(tmp_path / "jobs.csv", {"fifo": [SimResult("fifo", "w", 4, [job])]})
    [row] = list(csv.DictReader(path.open()))
    assert [c for c in JOBS_CSV_COLUMNS if c.startswith("wait_")] == list(WAIT_COLUMNS.values())
    assert len(WAIT_COLUMNS) == len(WaitKind)
    assert float(row["wait_quota_s"]) == 60.0 and float(row["wait_arriving_s"]) == 30.0
    assert float(row["wait_ranked_lower_s"]) == 0.0
    assert _job(row, 2, path).waited_by_reason == {"arriving": 30.0, "quota": 60.0}
    older = {k: v for k, v in row.items() if not k.startswith("wait_")}
    assert _job(older, 2, path).waited_by_reason == {}
