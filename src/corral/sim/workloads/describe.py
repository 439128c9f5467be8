"""Summarize a workload (what `corral workloads FILE` prints)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from corral.sim.workloads.common import Workload


def describe_workload(w: Workload) -> dict[str, Any]:
    """Counts per application, GPU-request histogram, time span and arrival rate of a workload.

    Keys: `name`, `source`, `jobs`, `apps` ({app: jobs}), `gpus` ({GPUs requested: jobs}),
    `configs` ({app: {"GPUSxBATCH": jobs}}), `requested_gpus` (sum over jobs), `adaptive_jobs`,
    `first_submit_s`, `last_submit_s`, `span_s`, `arrival_rate_per_hour` (jobs after the first
    per hour of span; None for fewer than two distinct submit times) and `trace_gpu_hours`
    (total GPU-hours of the source trace's jobs, None when the source does not say) and
    `columns` ({column: how it was read}, None when the loader does not say).
    """
    jobs = w.jobs
    submits = [j.submit_time_s for j in jobs]
    first = min(submits, default=0.0)
    last = max(submits, default=0.0)
    span = last - first
    configs: dict[str, Counter[str]] = {}
    for j in jobs:
        configs.setdefault(j.app, Counter())[f"{j.gpus}x{j.batch_size}"] += 1
    return {
        "name": w.name,
        "source": w.source,
        "jobs": len(jobs),
        "apps": dict(sorted(Counter(j.app for j in jobs).items())),
        "gpus": dict(sorted(Counter(j.gpus for j in jobs).items())),
        "configs": {a: dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))
                    for a, c in sorted(configs.items())},
        "requested_gpus": sum(j.gpus for j in jobs),
        "adaptive_jobs": sum(1 for j in jobs if j.adaptive),
        "first_submit_s": first,
        "last_submit_s": last,
        "span_s": span,
        "arrival_rate_per_hour": (len(jobs) - 1) / span * 3600.0 if span > 0 else None,
        "trace_gpu_hours": (sum(w.trace_gpu_s.values()) / 3600.0
                            if w.trace_gpu_s is not None else None),
        "columns": dict(w.columns) if w.columns is not None else None,
    }


def format_description(d: dict[str, Any]) -> str:
    """`describe_workload`'s dict as a few human-readable lines."""
    rate = d["arrival_rate_per_hour"]
    lines = [
        f"{d['name']}: {d['jobs']} jobs ({d['adaptive_jobs']} adaptive), source {d['source']}",
        f"  submitted over {d['span_s'] / 3600:.2f} h"
        + (f", {rate:.1f} jobs/h" if rate is not None else ""),
        "  apps: " + ", ".join(f"{a} {n}" for a, n in d["apps"].items()),
        "  GPUs requested: " + ", ".join(f"{g}: {n}" for g, n in d["gpus"].items())
        + f" (total {d['requested_gpus']})",
    ]
    for app, cfg in d["configs"].items():
        lines.append(f"  {app} GPUsxbatch: " + ", ".join(f"{c} ({n})" for c, n in cfg.items()))
    if d["trace_gpu_hours"] is not None:
        lines.append(f"  trace GPU-hours: {d['trace_gpu_hours']:.1f}")
    for col, how in (d.get("columns") or {}).items():
        lines.append(f"  column {col}: {how}")
    return "\n".join(lines)
