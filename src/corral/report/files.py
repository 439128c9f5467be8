"""Write a comparison's results to a folder: summary.json, jobs.csv, the two timelines, plots.

`write_outputs(out_dir, results, summaries)` writes them; the format of each file and the meaning
of every field are documented once, in docs/traces.md ("Output files"), with the definitions
computed in `corral.sim.analysis.metrics`. `corral.report.readback.read_outputs` reads the files
back, so `corral report DIR` rebuilds report.html from them alone.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from corral.core.reasons import WaitKind
from corral.sim.analysis.metrics import Summary, job_ftf, mean_summary, summarize
from corral.sim.loop.results import SimResult

SCHEMA_VERSION = 1

#: Seconds a job waited for each reason (`corral.core.reasons.WaitKind`), one column each.
WAIT_COLUMNS: dict[WaitKind, str] = {kind: f"wait_{kind.value}_s" for kind in WaitKind}
JOBS_CSV_COLUMNS: tuple[str, ...] = (
    "policy", "workload", "name", "app", "submit_s", "first_start_s", "finish_s", "jct_s",
    "restarts", "attained_gpu_s", "requested_gpus", "isolated_jct_s", "ftf",
    *WAIT_COLUMNS.values(),
)

GPU_TIMELINE_COLUMNS: tuple[str, ...] = ("policy", "workload", "time_s", "gpus", "cluster_gpus")
ALLOCATIONS_CSV_COLUMNS: tuple[str, ...] = ("policy", "workload", "job", "time_s", "gpus")

SummariesArg = Mapping[str, Sequence[Summary] | Mapping[str, Summary]]
#: Per policy, per run (parallel to its results): {queue: figures}, or None.
QueuesArg = Mapping[str, Sequence[Mapping[str, Any] | None]]


def workload_keys(runs: Sequence[SimResult]) -> list[str]:
    """Workload names of one policy's runs, made unique with `#2`, `#3`, ... suffixes."""
    seen: dict[str, int] = {}
    keys = []
    for r in runs:
        seen[r.workload] = seen.get(r.workload, 0) + 1
        keys.append(r.workload if seen[r.workload] == 1 else f"{r.workload}#{seen[r.workload]}")
    return keys


def _policy_summaries(runs: Sequence[SimResult], keys: list[str],
                      given: Sequence[Summary] | Mapping[str, Summary] | None) -> list[Summary]:
    if given is None:
        return [summarize(r) for r in runs]
    if isinstance(given, Mapping):
        return [given[k] if k in given else summarize(r) for k, r in zip(keys, runs)]
    if len(given) != len(runs):
        raise ValueError(f"{len(given)} summaries for {len(runs)} results")
    return list(given)


def summary_document(results: Mapping[str, Sequence[SimResult]],
                     summaries: SummariesArg | None = None,
                     queues: QueuesArg | None = None) -> dict[str, Any]:
    """The summary.json object (see the module docstring). `queues`, per policy a list parallel
    to its results, adds each run's per-queue figures under its workload's `queues`
    (`corral.sim.analysis.queue_metrics`)."""
    policies: dict[str, Any] = {}
    for policy, runs in results.items():
        keys = workload_keys(runs)
        sums = _policy_summaries(runs, keys, None if summaries is None else summaries.get(policy))
        per_queue = (queues or {}).get(policy) or [None] * len(runs)
        policies[policy] = {
            "mean": mean_summary(sums),
            "workloads": {k: (s.to_dict() if q is None else {**s.to_dict(), "queues": q})
                          for k, s, q in zip(keys, sums, per_queue)},
        }
    return {"schema": SCHEMA_VERSION, "policies": policies}


def _cell(value: Any) -> Any:
    return "" if value is None else value


def write_jobs_csv(path: str | Path, results: Mapping[str, Sequence[SimResult]]) -> Path:
    path = Path(path)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        typed = any(j.gpu_s_by_type for runs in results.values() for r in runs for j in r.jobs)
        writer.writerow(JOBS_CSV_COLUMNS + (("gpu_s_by_type",) if typed else ()))
        for policy, runs in results.items():
            for key, r in zip(workload_keys(runs), runs):
                for j in r.jobs:
                    row = [_cell(v) for v in (
                        policy, key, j.name, j.app, j.submit_s, j.first_start_s, j.finish_s,
                        j.jct_s, j.restarts, j.attained_gpu_s, j.requested_gpus,
                        j.isolated_jct_s, job_ftf(j))]
                    row += [j.waited_by_reason.get(kind.value, 0.0) for kind in WaitKind]
                    if typed:  # a cluster of several GPU types: `k80=120.0;v100=60.5`
                        row.append(";".join(f"{t}={v!r}" for t, v in j.gpu_s_by_type.items()))
                    writer.writerow(row)
    return path


def write_timelines(out_dir: str | Path, results: Mapping[str, Sequence[SimResult]]
                    ) -> dict[str, Path]:
    """Write gpu_timeline.csv and allocations.csv (see the module docstring)."""
    out = Path(out_dir)
    usage, allocs = out / "gpu_timeline.csv", out / "allocations.csv"
    with usage.open("w", newline="") as fu, allocs.open("w", newline="") as fa:
        u, a = csv.writer(fu), csv.writer(fa)
        u.writerow(GPU_TIMELINE_COLUMNS)
        a.writerow(ALLOCATIONS_CSV_COLUMNS)
        for policy, runs in results.items():
            for key, r in zip(workload_keys(runs), runs):
                for t, gpus in r.gpu_timeline:
                    u.writerow([policy, key, t, gpus, r.cluster_gpus])
                for job, history in r.allocations.items():
                    for t, gpus in history:
                        a.writerow([policy, key, job, t, gpus])
    return {"gpu_timeline": usage, "allocations": allocs}


def write_outputs(out_dir: str | Path, results: Mapping[str, Sequence[SimResult]],
                  summaries: SummariesArg | None = None, plots: bool = True,
                  queues: QueuesArg | None = None, oracles: Collection[str] = ()
                  ) -> dict[str, Path]:
    """Write summary.json, jobs.csv, gpu_timeline.csv, allocations.csv and (if `plots`)
    jct_cdf.png, gpu_usage.png and report.html to `out_dir`.

    `results` is `{policy: [SimResult per workload]}`. `summaries`, when given, is per policy
    either a list parallel to its results or `{workload: Summary}`; runs without one are
    summarised here. `queues`: per-queue figures for summary.json (`summary_document`).
    `oracles`: the policies report.html marks as oracles.
    Returns `{file kind: path}` for the files written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}

    doc = summary_document(results, summaries, queues)
    summary_path = out / "summary.json"
    summary_path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    written["summary"] = summary_path
    written["jobs"] = write_jobs_csv(out / "jobs.csv", results)
    written.update(write_timelines(out, results))

    if plots:
        from corral.report.html import write_html_report
        from corral.report.plots import plot_gpu_usage, plot_jct_cdf

        written["jct_cdf"] = plot_jct_cdf(results, out / "jct_cdf.png")
        written["gpu_usage"] = plot_gpu_usage(results, out / "gpu_usage.png")
        written["report"] = write_html_report(out, oracles)
    return written
