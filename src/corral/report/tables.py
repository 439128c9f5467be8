"""Rich tables comparing policies: every metric per (policy, workload), or avg JCT side by side.

Formats, used the same way in every table: simulated times are whole seconds (`"2751 s"`),
finish-time fairness and the lower-bound ratio are plain numbers with two decimals (`"1.42"`,
`"1.18x"`), GPU utilisation is a percentage (`"87.3%"`), wall-clock time has one decimal
(`"12.3 s"`). A missing value (None) prints as `"-"`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich.table import Table

from corral.sim.analysis.metrics import Summary, mean_summary

MISSING = "-"


def _as_dict(summary: Summary | Mapping[str, Any]) -> Mapping[str, Any]:
    return summary.to_dict() if isinstance(summary, Summary) else summary


def fmt_seconds(value: float | None) -> str:
    """Simulated time in whole seconds: `"2751 s"`."""
    return MISSING if value is None else f"{value:.0f} s"


def fmt_wall(value: float | None) -> str:
    return MISSING if value is None else f"{value:.1f} s"


def fmt_number(value: float | None, digits: int = 2) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def fmt_ratio(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}x"


def fmt_percent(value: float | None) -> str:
    return MISSING if value is None else f"{100.0 * value:.1f}%"


#: (header, summary field, formatter) of every metric column, shared by the HTML report.
METRIC_COLUMNS: tuple[tuple[str, str, Any], ...] = (
    ("avg JCT", "avg_jct_s", fmt_seconds),
    ("p50", "p50_jct_s", fmt_seconds),
    ("p99", "p99_jct_s", fmt_seconds),
    ("makespan", "makespan_s", fmt_seconds),
    ("queue", "avg_queue_s", fmt_seconds),
    ("FTF p99", "ftf_p99", fmt_number),
    ("FTF max", "ftf_max", fmt_number),
    ("restarts/job", "restarts_per_job", fmt_number),
    ("GPU util", "gpu_util", fmt_percent),
    ("LB ratio", "lower_bound_ratio", fmt_ratio),
    ("LP bound", "lp_bound_avg_jct_s", fmt_seconds),
    ("gap", "gap", fmt_ratio),
    ("wall", "wall_s", fmt_wall),
)


def comparison_table(rows: Iterable[tuple[str, str, Summary | Mapping[str, Any]]],
                     title: str | None = None) -> Table:
    """One row per `(policy, workload or "mean", Summary or summary dict)`, every metric.

    When a run stopped before every job finished, a last column "stopped early" says why in
    words (and its figures cover only the finished jobs); it is left out when none did.
    """
    rows = [(policy, workload, _as_dict(summary)) for policy, workload, summary in rows]
    stops = any(d.get("stopped") for _, _, d in rows)
    table = Table(title=title)
    table.add_column("policy", style="bold")
    table.add_column("workload")
    for header, _, _ in METRIC_COLUMNS:
        table.add_column(header, justify="right")
    if stops:
        table.add_column("stopped early", style="yellow")
    for policy, workload, d in rows:
        cells = [fmt(d.get(key)) for _, key, fmt in METRIC_COLUMNS]
        if stops:
            cells.append(d.get("stopped") or MISSING)
        table.add_row(policy, workload, *cells)
    return table


def per_workload_table(by_policy: Mapping[str, Mapping[str, Summary | Mapping[str, Any]]],
                       reference: Mapping[str, float | None] | None = None,
                       reference_label: str = "reference",
                       title: str | None = None) -> Table:
    """Average JCT per workload (rows) for each policy (columns), with a final "mean" row.

    `by_policy` is `{policy: {workload: Summary}}`. The mean row is each policy's mean avg JCT
    over its workloads. `reference`, if given, adds a last column `{workload: avg JCT}` (e.g. a
    paper's numbers); its mean row is `reference["mean"]` when present, else the mean of the
    reference values of the listed workloads.
    """
    workloads: list[str] = []
    for per in by_policy.values():
        for w in per:
            if w not in workloads:
                workloads.append(w)

    table = Table(title=title)
    table.add_column("workload", style="bold")
    for policy in by_policy:
        table.add_column(policy, justify="right")
    if reference is not None:
        table.add_column(reference_label, justify="right")

    for w in workloads:
        cells = []
        for per in by_policy.values():
            s = per.get(w)
            cells.append(fmt_seconds(_as_dict(s).get("avg_jct_s")) if s is not None else MISSING)
        if reference is not None:
            cells.append(fmt_seconds(reference.get(w)))
        table.add_row(w, *cells)

    mean_cells = [fmt_seconds(mean_summary(per.values())["avg_jct_s"])
                  for per in by_policy.values()]
    if reference is not None:
        if reference.get("mean") is not None:
            ref_mean = reference["mean"]
        else:
            vals = [reference[w] for w in workloads if reference.get(w) is not None]
            ref_mean = sum(vals) / len(vals) if vals else None
        mean_cells.append(fmt_seconds(ref_mean))
    table.add_section()
    table.add_row("mean", *mean_cells, style="bold")
    return table
