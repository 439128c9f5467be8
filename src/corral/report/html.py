"""report.html: a simulation's results in one self-contained page (plots inline, no links out).

`write_html_report(DIR)` reads a results folder (`corral.report.readback.read_outputs`) and
writes DIR/report.html: what the comparison shows in words (`corral.report.findings`), the
comparison table (each policy's mean over workloads), one table per workload, the JCT CDF, the
GPUs in use over time, queueing and finish-time fairness, and the allocation timeline (which
job held how many GPUs when) of the first workload. Figures are PNGs embedded as data: URLs,
so the file can be mailed or opened offline. `corral simulate --out DIR` calls it; so does
`corral report DIR`, which rebuilds the page from the files alone.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from corral.report.findings import findings
from corral.report.readback import Outputs, read_outputs
from corral.report.tables import METRIC_COLUMNS, MISSING

__all__ = ["render_html_report", "write_html_report"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .6em 0; font-size: .92em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
tr.best td { background: #eaf6ea; } img { max-width: 100%; } .note { color: #666; }
ul.findings li { margin: .2em 0; }
"""


def _e(text: Any) -> str:
    return html.escape(str(text))


def _table(headers: Iterable[str], rows: Iterable[tuple[str, list[str]]],
           table_id: str) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(f'<tr class="{cls}">' + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>"
                   for cls, cells in rows)
    return f'<table id="{_e(table_id)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _metric_rows(by_policy: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    jcts = [j for d in by_policy.values() if (j := d.get("avg_jct_s")) is not None]
    best = min(jcts) if jcts else None
    rows = []
    for policy, d in by_policy.items():
        cells = [policy] + [fmt(d.get(key)) for _, key, fmt in METRIC_COLUMNS]
        stopped = d.get("stopped")
        cells.append(str(stopped) if stopped else MISSING)
        rows.append(("best" if best is not None and d.get("avg_jct_s") == best else "", cells))
    return rows


def _image(fig: Any, alt: str) -> str:
    from corral.report.plots import png_bytes

    data = base64.b64encode(png_bytes(fig)).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def render_html_report(outputs: Outputs, title: str = "corral simulation report",
                       oracles: Collection[str] = ()) -> str:
    """The page for `outputs` (see the module docstring); `oracles`: the policies its findings
    mark as oracles (`corral.report.findings`)."""
    from corral.report.plots import (
        allocation_figure,
        gpu_usage_figure,
        jct_cdf_figure,
        queue_fairness_figure,
    )

    policies = outputs.summary["policies"]
    headers = ["policy", *(h for h, _, _ in METRIC_COLUMNS), "stopped early"]
    workloads: list[str] = []
    for doc in policies.values():
        workloads += [w for w in doc.get("workloads") or {} if w not in workloads]
    parts = [f"<h1>{_e(title)}</h1>",
             f'<p class="note">{len(policies)} policies on {len(workloads)} workload(s): '
             f'{_e(", ".join(workloads))}. Times are simulated seconds; the shortest average '
             "JCT is highlighted.</p>"]
    words = findings(outputs.summary, oracles)
    if words:
        parts.append('<h2>What it shows</h2><ul class="findings">'
                     + "".join(f"<li>{_e(w)}</li>" for w in words) + "</ul>")
    parts.append("<h2>Comparison (mean over workloads)</h2>")
    parts.append(_table(headers, _metric_rows({p: d.get("mean") or {} for p, d in
                                               policies.items()}), "comparison"))
    parts.append("<h2>Per workload</h2>")
    for k, w in enumerate(workloads):
        per = {p: d["workloads"][w] for p, d in policies.items() if w in (d.get("workloads") or {})}
        parts.append(f"<h3>{_e(w)}</h3>" + _table(headers, _metric_rows(per), f"workload-{k}"))
    queued = [(p, w, d["workloads"][w]["queues"]) for w in workloads for p, d in policies.items()
              if "queues" in ((d.get("workloads") or {}).get(w) or {})]
    if queued:
        from corral.report.queues import QUEUE_HEADERS, queue_rows

        parts.append("<h2>Per queue</h2>" + _table(QUEUE_HEADERS, [("", r) for r in
                                                                   queue_rows(queued)], "queues"))
    results = outputs.results
    parts.append("<h2>JCT distribution</h2>" + _image(jct_cdf_figure(results), "JCT CDF"))
    parts.append("<h2>GPUs in use over time</h2>")
    if outputs.has_timelines:
        parts.append(_image(gpu_usage_figure(results), "GPUs in use over time"))
    else:
        parts.append('<p class="note">gpu_timeline.csv is not in this folder.</p>')
    parts.append("<h2>Queueing and fairness</h2>"
                 + _image(queue_fairness_figure(results), "queueing delay and fairness CDFs"))
    parts.append(f"<h2>Allocation timeline: {_e(workloads[0]) if workloads else ''}</h2>")
    if outputs.has_allocations:
        parts.append(_image(allocation_figure(results), "GPUs per job over time"))
    else:
        parts.append('<p class="note">allocations.csv is not in this folder (or empty).</p>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>\n"
            + "\n".join(parts) + "\n</body></html>\n")


def write_html_report(out_dir: str | Path, oracles: Collection[str] = ()) -> Path:
    """Read the results folder `out_dir` and write `out_dir/report.html`; returns its path."""
    out = Path(out_dir)
    page = render_html_report(read_outputs(out), oracles=oracles)
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
