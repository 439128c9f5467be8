"""Reporting: comparison tables (rich), output files (summary.json, jobs.csv) and PNG plots.

The plot functions import matplotlib, so they are loaded only when first used.
"""

from __future__ import annotations

from typing import Any

from corral.report.files import (
    JOBS_CSV_COLUMNS,
    SCHEMA_VERSION,
    summary_document,
    write_jobs_csv,
    write_outputs,
)
from corral.report.tables import comparison_table, per_workload_table

__all__ = [
    "JOBS_CSV_COLUMNS", "SCHEMA_VERSION", "comparison_table", "per_workload_table",
    "plot_gpu_usage", "plot_jct_cdf", "summary_document", "write_jobs_csv", "write_outputs",
]


def __getattr__(name: str) -> Any:
    if name in ("plot_jct_cdf", "plot_gpu_usage"):
        from corral.report import plots

        return getattr(plots, name)
    raise AttributeError(f"module 'corral.report' has no attribute {name!r}")
