"""Write a comparison's results to a folder: summary.json, jobs.csv and PNG plots.

`write_outputs(out_dir, results, summaries)` writes:

* `summary.json` -- the metrics of every run and their mean per policy::

      {
        "schema": 1,
        "policies": {
          "<policy>": {
            "mean":      {<summary fields>},        # field-wise mean over the workloads
            "workloads": {"<workload>": {<summary fields>}, ...}
          },
          ...
        }
      }

  `<summary fields>` are, in this order (times in seconds; see `corral.sim.analysis.metrics` for the
  exact definitions):

  ========================  ================================================================
  avg_jct_s                 mean job completion time (finish - submit) of finished jobs
  p50_jct_s, p99_jct_s      JCT percentiles (linear interpolation, numpy's default)
  makespan_s                last finish - first submission
  avg_queue_s               mean first_start_s - submit_s of finished jobs
  ftf_p50, ftf_p99,         finish-time fairness rho = jct / fair_share_jct, percentiles and
  ftf_max                   maximum over finished jobs that have a fair-share JCT
  restarts_per_job          mean restarts of finished jobs
  gpu_util                  mean fraction of cluster GPUs allocated, first submit to last finish
  lower_bound_avg_jct_s     mean isolated JCT (each job alone on the whole cluster)
  lower_bound_ratio         avg_jct_s / lower_bound_avg_jct_s
  lp_bound_avg_jct_s        the workload's LP relaxation bound on the average JCT of any
                            schedule (corral.sim.analysis.lp_bound), at least lower_bound_avg_jct_s;
                            null when not computed
  gap                       avg_jct_s / lp_bound_avg_jct_s (null unless every job finished)
  finished, unfinished      job counts (unfinished jobs are left out of every per-job statistic)
  wall_s                    wall-clock seconds the simulation took
  stopped                   null when every job finished; else why the run stopped early, in
                            words (the horizon, its basis, and how many jobs were unfinished);
                            in "mean", how many workloads stopped early
  ========================  ================================================================

  A value that cannot be computed (no finished jobs, no fair-share JCTs, ...) is `null`. In
  "mean" each field is the mean over the workloads where it is not null (`null` if none), and
  the counts are means too. A workload name repeated within one policy gets a `#2`, `#3`, ...
  suffix (the same key is used in jobs.csv).

* `jobs.csv` -- one row per job and policy, columns `JOBS_CSV_COLUMNS`: policy, workload, name,
  app, submit_s, first_start_s, finish_s, jct_s, restarts, attained_gpu_s, requested_gpus,
  isolated_jct_s, ftf. Missing values (an unfinished job's finish) are empty cells.

* `gpu_timeline.csv` -- the GPUs in use over time of every run, a step function: columns
  `GPU_TIMELINE_COLUMNS` (policy, workload, time_s, gpus, cluster_gpus); `gpus` holds from
  `time_s` to the next row of the same run.

* `allocations.csv` -- which job held how many GPUs when, changes only: columns
  `ALLOCATIONS_CSV_COLUMNS` (policy, workload, job, time_s, gpus); a job holds its last value
  until its finish in jobs.csv. Empty (header only) for results that did not record them
  (`corral.sim.analysis.allocations`).

* `jct_cdf.png` (JCT CDF per policy over all workloads), `gpu_usage.png` (GPUs in use over
  time per policy, first workload) and `report.html` (every table and plot in one
  self-contained page, `corral.report.html`), unless `plots=False`.

`corral.report.readback.read_outputs` reads these files back, so `corral report DIR` rebuilds
report.html from them alone.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from corral.sim.analysis.metrics import Summary, job_ftf, mean_summary, summarize
from corral.sim.loop.results import SimResult

SCHEMA_VERSION = 1

JOBS_CSV_COLUMNS: tuple[str, ...] = (
    "policy", "workload", "name", "app", "submit_s", "first_start_s", "finish_s", "jct_s",
    "restarts", "attained_gpu_s", "requested_gpus", "isolated_jct_s", "ftf",
)

GPU_TIMELINE_COLUMNS: tuple[str, ...] = ("policy", "workload", "time_s", "gpus", "cluster_gpus")
ALLOCATIONS_CSV_COLUMNS: tuple[str, ...] = ("policy", "workload", "job", "time_s", "gpus")

SummariesArg = Mapping[str, Sequence[Summary] | Mapping[str, Summary]]


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
                     summaries: SummariesArg | None = None) -> dict[str, Any]:
    """The summary.json object (see the module docstring)."""
    policies: dict[str, Any] = {}
    for policy, runs in results.items():
        keys = workload_keys(runs)
        sums = _policy_summaries(runs, keys, None if summaries is None else summaries.get(policy))
        policies[policy] = {
            "mean": mean_summary(sums),
            "workloads": {k: s.to_dict() for k, s in zip(keys, sums)},
        }
    return {"schema": SCHEMA_VERSION, "policies": policies}


def _cell(value: Any) -> Any:
    return "" if value is None else value


def write_jobs_csv(path: str | Path, results: Mapping[str, Sequence[SimResult]]) -> Path:
    path = Path(path)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(JOBS_CSV_COLUMNS)
        for policy, runs in results.items():
            for key, r in zip(workload_keys(runs), runs):
                for j in r.jobs:
                    writer.writerow([_cell(v) for v in (
                        policy, key, j.name, j.app, j.submit_s, j.first_start_s, j.finish_s,
                        j.jct_s, j.restarts, j.attained_gpu_s, j.requested_gpus,
                        j.isolated_jct_s, job_ftf(j))])
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
                  summaries: SummariesArg | None = None, plots: bool = True) -> dict[str, Path]:
    """Write summary.json, jobs.csv, gpu_timeline.csv, allocations.csv and (if `plots`)
    jct_cdf.png, gpu_usage.png and report.html to `out_dir`.

    `results` is `{policy: [SimResult per workload]}`. `summaries`, when given, is per policy
    either a list parallel to its results or `{workload: Summary}`; runs without one are
    summarised here. Returns `{file kind: path}` for the files written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}

    doc = summary_document(results, summaries)
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
        written["report"] = write_html_report(out)
    return written
