"""Rich tables comparing policies: every metric per (policy, workload), or avg JCT side by side.

Formats, used the same way in every table: simulated times are whole seconds (`"2751 s"`),
finish-time fairness and the lower-bound ratio are plain numbers with two decimals (`"1.42"`,
`"1.18x"`), GPU utilisation is a percentage (`"87.3%"`), wall-clock time has one decimal
(`"12.3 s"`). A missing value (None) prints as `"-"`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.console import JustifyMethod
from rich.markup import escape
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


@dataclass(frozen=True)
class Col:
    """A column of a table that fits its width (`fitted_table`).

    `rank` 0: always shown; otherwise the order in which columns are added while they fit (1
    first). `wrap`: prose that may wrap between words; any other column keeps its cells on one
    line. No cell is ever cut to an ellipsis: a word too long for its column folds onto the
    next line.
    """

    header: str
    rank: int = 0
    justify: JustifyMethod = "left"
    style: str | None = None
    wrap: bool = False


def table_width(widths: Sequence[int]) -> int:
    """Width of a default rich Table whose columns hold `widths` characters: one space of
    padding either side of each cell and a border between and around the columns."""
    return sum(widths) + 3 * len(widths) + 1


def _content_width(col: Col, cells: Iterable[str]) -> int:
    texts = [col.header, *cells]
    whole = max(cell_len(line) for t in texts for line in (t.splitlines() or [""]))
    if col.wrap:  # room for a few words a line: the longest word, the header, 16 at least
        word = max([cell_len(col.header)] + [cell_len(w) for t in texts for w in t.split()])
        return min(whole, max(word, 16))
    return whole


def fitted_table(cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int | None,
                 title: str | None = None, more: str = "--wide",
                 markup: bool = False) -> tuple[Table, list[str]]:
    """A table of the columns that fit in `width` characters, most important first.

    Columns of rank 0 are always there; the others join in rank order while the table still
    fits, and the first that does not stops it (so a less important one never shows where a
    more important one does not). `width` None: every column. The headers of the columns left
    out are returned, and named in the table's caption with `more` (the option that shows
    them). Cells are plain text (escaped here) unless `markup`.
    """
    widths = [_content_width(c, [r[i] for r in rows]) for i, c in enumerate(cols)]
    shown = [i for i, c in enumerate(cols) if c.rank == 0]
    if width is None:
        shown = list(range(len(cols)))
    else:
        for i in sorted((i for i, c in enumerate(cols) if c.rank), key=lambda i: cols[i].rank):
            if table_width([widths[j] for j in shown] + [widths[i]]) > width:
                break
            shown.append(i)
        shown.sort()
    hidden = [c.header for i, c in enumerate(cols) if i not in shown]
    caption = f"{len(hidden)} more column(s) with {more}: {', '.join(hidden)}" if hidden else None
    table = Table(title=title, caption=caption, caption_justify="left")
    # a table that fits keeps every column at its width; one that cannot (a narrow terminal,
    # every column needed) is left to rich, which folds cells rather than cropping the table
    fits = width is not None and table_width([widths[i] for i in shown]) <= width
    for i in shown:
        c = cols[i]
        table.add_column(c.header, justify=c.justify, style=c.style, no_wrap=not c.wrap,
                         overflow="fold", min_width=widths[i] if fits else None)
    for r in rows:
        table.add_row(*(r[i] if markup else escape(r[i]) for i in shown))
    return table, hidden


#: The order in which `comparison_table(width=...)` shows the metrics when not all fit.
METRIC_RANKS = {"avg_jct_s": 0, "p99_jct_s": 1, "makespan_s": 2, "gpu_util": 3, "ftf_max": 4,
                "gap": 5, "avg_queue_s": 6, "p50_jct_s": 7, "restarts_per_job": 8,
                "lower_bound_ratio": 9, "lp_bound_avg_jct_s": 10, "ftf_p99": 11, "wall_s": 12}

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
                     title: str | None = None, width: int | None = None,
                     more: str = "--wide") -> Table:
    """One row per `(policy, workload or "mean", Summary or summary dict)`, every metric.

    When a run stopped before every job finished, a last column "stopped early" says why in
    words (and its figures cover only the finished jobs); it is left out when none did.

    `width` (a terminal's columns): only the metrics that fit, in `METRIC_RANKS` order (avg JCT
    always; a metric no row has comes last), the caption naming the others and `more`, the option that shows them; when every
    row has the same workload it is named in the title instead of a column.
    """
    dicts = [(policy, workload, _as_dict(summary)) for policy, workload, summary in rows]
    stops = any(d.get("stopped") for _, _, d in dicts)
    if width is not None:
        return _fitted_comparison(dicts, title, width, stops, more)
    table = Table(title=title)
    table.add_column("policy", style="bold")
    table.add_column("workload")
    for header, _, _ in METRIC_COLUMNS:
        table.add_column(header, justify="right")
    if stops:
        table.add_column("stopped early", style="yellow")
    for policy, workload, d in dicts:
        cells = [fmt(d.get(key)) for _, key, fmt in METRIC_COLUMNS]
        if stops:
            cells.append(d.get("stopped") or MISSING)
        table.add_row(policy, workload, *cells)
    return table


def _fitted_comparison(rows: list[tuple[str, str, Mapping[str, Any]]], title: str | None,
                       width: int, stops: bool, more: str) -> Table:
    workloads = list(dict.fromkeys(w for _, w, _ in rows))
    one = len(workloads) == 1
    if one:
        title = f"{title}: {workloads[0]}" if title else f"workload {workloads[0]}"
    cols = [Col("policy", style="bold")] + ([] if one else [Col("workload")])
    # a metric no row has (the gap without --lp-bound) comes last: a column of dashes tells little
    cols += [Col(header, rank=METRIC_RANKS.get(key, 99) if any(d.get(key) is not None
                                                              for _, _, d in rows) else 100,
                 justify="right")
             for header, key, _ in METRIC_COLUMNS]
    if stops:
        cols.append(Col("stopped early", style="yellow", wrap=True))
    cells = []
    for policy, workload, d in rows:
        row = [policy] + ([] if one else [workload])
        row += [fmt(d.get(key)) for _, key, fmt in METRIC_COLUMNS]
        if stops:
            row.append(d.get("stopped") or MISSING)
        cells.append(row)
    table, _ = fitted_table(cols, cells, width, title=title, more=more)
    return table


def per_workload_tables(by_policy: Mapping[str, Mapping[str, Summary | Mapping[str, Any]]],
                        width: int | None, title: str | None = None) -> list[Table]:
    """`per_workload_table` split into tables of as many policies as fit in `width` (each
    with the workload column); one table when they all fit or `width` is None."""
    def cells(policies: list[str]) -> list[str]:
        out = []
        for p in policies:
            per = by_policy[p]
            out += [p, *(fmt_seconds(_as_dict(s).get("avg_jct_s")) for s in per.values()),
                    fmt_seconds(mean_summary(per.values())["avg_jct_s"])]
        return out

    names = [w for per in by_policy.values() for w in per] + ["workload", "mean"]
    first = max(cell_len(w) for w in names)
    groups: list[list[str]] = [[]]
    for p in by_policy:
        group = groups[-1] + [p]
        need = table_width([first] + [max(cell_len(c) for c in cells([q]) + ["-"]) for q in group])
        if groups[-1] and width is not None and need > width:
            groups.append([p])
        else:
            groups[-1] = group
    tables = []
    for k, group in enumerate(groups):
        table = per_workload_table({p: by_policy[p] for p in group}, title=title if k == 0 else None)
        for column in table.columns:
            column.no_wrap = True
            column.overflow = "fold"
        tables.append(table)
    return tables


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
            vals = [v for w in workloads if (v := reference.get(w)) is not None]
            ref_mean = sum(vals) / len(vals) if vals else None
        mean_cells.append(fmt_seconds(ref_mean))
    table.add_section()
    table.add_row("mean", *mean_cells, style="bold")
    return table
