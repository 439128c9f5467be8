"""Summary statistics of one simulation run (`SimResult`) and their mean over workloads.

Times in seconds. Per-job statistics cover *finished* jobs (the rest count in `unfinished`):
JCT = finish - submit (mean, p50, p99); queue = first start - submit; finish-time fairness
rho = JCT / fair-share JCT (Pollux (OSDI'21) §5.3.1); restarts. Makespan = last finish - first
submission; GPU utilisation = time-average of `gpu_timeline` over that span. `lower_bound_ratio`
= avg JCT / mean `isolated_jct_s`; `gap` = avg JCT / LP bound (`corral.sim.analysis.lp_bound`,
raised to the lower bound; None unless every job finished). `stopped`: the horizon's note.
Any statistic without data is None, never NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from corral.sim.loop.results import JobRecord, SimResult


@dataclass(frozen=True, slots=True)
class Summary:
    """The summary of one run; its fields are the per-workload schema of `summary.json`."""

    avg_jct_s: float | None
    p50_jct_s: float | None
    p99_jct_s: float | None
    makespan_s: float | None
    avg_queue_s: float | None
    ftf_p50: float | None
    ftf_p99: float | None
    ftf_max: float | None
    restarts_per_job: float | None
    gpu_util: float | None
    lower_bound_avg_jct_s: float | None
    lower_bound_ratio: float | None
    lp_bound_avg_jct_s: float | None
    gap: float | None
    finished: int
    unfinished: int
    wall_s: float
    #: Why the run ended before every job finished, in words; None when every job finished.
    stopped: str | None = None
    #: On a cluster of several GPU types: the share of the faster types' GPU-seconds that went
    #: to the jobs gaining most from them (`corral.sim.loop.results.fast_gpu_share`); left out
    #: of `to_dict` (and summary.json) when None, so one-type runs' files are as before.
    fast_gpu_share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        for name in OPTIONAL_FIELDS:
            if doc[name] is None:
                del doc[name]
        return doc


#: Fields written only where they have a value (`Summary.to_dict`, `mean_summary`), after the
#: others.
OPTIONAL_FIELDS: tuple[str, ...] = ("fast_gpu_share",)
#: Field names of `Summary`, in order, less the optional ones (the keys of each summary object
#: in `summary.json`; an optional field follows them where it has a value).
SUMMARY_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Summary)
                                        if f.name not in OPTIONAL_FIELDS)
#: Fields that are words, not figures (left out of means).
TEXT_FIELDS: frozenset[str] = frozenset({"stopped"})


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0 <= q <= 100) by linear interpolation between order statistics.

    This is numpy's default (`method="linear"`, Hyndman & Fan type 7): with the values sorted as
    `x[0] <= ... <= x[n-1]`, let `h = (n - 1) * q / 100`, `i = floor(h)`; the result is
    `x[i] + (h - i) * (x[i+1] - x[i])` (just `x[n-1]` when `i = n - 1`). None for no values.
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    xs = sorted(float(v) for v in values)
    if not xs:
        return None
    h = (len(xs) - 1) * q / 100.0
    i = math.floor(h)
    if i >= len(xs) - 1:
        return xs[-1]
    return xs[i] + (h - i) * (xs[i + 1] - xs[i])


def _mean(values: Sequence[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def job_ftf(job: JobRecord) -> float | None:
    """Finish-time fairness rho of one job, or None if unfinished or without a fair-share JCT."""
    jct = job.jct_s
    if jct is None or job.fair_share_jct_s is None or job.fair_share_jct_s <= 0:
        return None
    return jct / job.fair_share_jct_s


def busy_gpu_seconds(timeline: Sequence[tuple[float, int]], start: float, end: float) -> float:
    """Integral of the GPU-allocation step function over `[start, end]` (0 before its first entry)."""
    if end <= start or not timeline:
        return 0.0
    points = sorted(timeline, key=lambda p: p[0])
    total = 0.0
    for k, (t, gpus) in enumerate(points):
        t_next = points[k + 1][0] if k + 1 < len(points) else math.inf
        lo, hi = max(t, start), min(t_next, end)
        if hi > lo:
            total += gpus * (hi - lo)
    return total


def summarize(result: SimResult) -> Summary:
    """Summarise one run (see the module docstring for each definition)."""
    jobs = result.jobs
    done = [j for j in jobs if j.finish_s is not None]
    jcts = [jct for j in done if (jct := j.jct_s) is not None]  # (all: they finished)

    first_submit = min((j.submit_s for j in jobs), default=None)
    last_finish = max((j.finish_s for j in done if j.finish_s is not None), default=None)
    makespan = (last_finish - first_submit
                if first_submit is not None and last_finish is not None else None)

    queues = [j.first_start_s - j.submit_s for j in done if j.first_start_s is not None]
    ftfs = [r for r in (job_ftf(j) for j in done) if r is not None]

    util = None
    if (result.gpu_timeline and result.cluster_gpus > 0 and makespan is not None
            and makespan > 0 and first_submit is not None and last_finish is not None):
        busy = busy_gpu_seconds(result.gpu_timeline, first_submit, last_finish)
        util = busy / (result.cluster_gpus * makespan)

    avg_jct = _mean(jcts)
    lb = None
    if done and all(j.isolated_jct_s is not None for j in done):
        lb = _mean([x for j in done if (x := j.isolated_jct_s) is not None])
    ratio = avg_jct / lb if avg_jct is not None and lb else None
    lp = result.lp_bound_avg_jct_s
    if lp is not None and lb is not None and len(done) == len(jobs):
        lp = max(lp, lb)
    gap = avg_jct / lp if avg_jct is not None and lp and len(done) == len(jobs) else None

    return Summary(
        avg_jct_s=avg_jct,
        p50_jct_s=percentile(jcts, 50),
        p99_jct_s=percentile(jcts, 99),
        makespan_s=makespan,
        avg_queue_s=_mean(queues),
        ftf_p50=percentile(ftfs, 50),
        ftf_p99=percentile(ftfs, 99),
        ftf_max=max(ftfs) if ftfs else None,
        restarts_per_job=_mean([float(j.restarts) for j in done]),
        gpu_util=util,
        lower_bound_avg_jct_s=lb,
        lower_bound_ratio=ratio,
        lp_bound_avg_jct_s=lp,
        gap=gap,
        finished=len(done),
        unfinished=len(jobs) - len(done),
        wall_s=float(result.wall_s),
        stopped=result.stopped,
        fast_gpu_share=result.fast_gpu_share,
    )


def mean_summary(summaries: Iterable[Summary | Mapping[str, Any]]) -> dict[str, Any]:
    """Field-wise mean over workloads, keyed by `SUMMARY_FIELDS`.

    None-safe: a field's mean is over the summaries where it is not None, and None when it is None
    in all of them (or there are no summaries). Counts (`finished`, `unfinished`) are averaged too.
    `stopped` says how many workloads stopped early ("2 of 8 workloads stopped early: ..." with
    the first one's note), None when none did.
    """
    dicts = [s.to_dict() if isinstance(s, Summary) else dict(s) for s in summaries]
    out: dict[str, float | str | None] = {}
    for name in SUMMARY_FIELDS:
        if name in TEXT_FIELDS:
            continue
        vals = [float(d[name]) for d in dicts if d.get(name) is not None]
        out[name] = _mean(vals)
    notes = [d["stopped"] for d in dicts if d.get("stopped")]
    out["stopped"] = (f"{len(notes)} of {len(dicts)} workloads stopped early: {notes[0]}"
                      if notes else None)
    for name in OPTIONAL_FIELDS:
        vals = [float(d[name]) for d in dicts if d.get(name) is not None]
        if vals:
            out[name] = _mean(vals)
    return out


def gpu_utilization_series(result: SimResult, step_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Sample the GPU-allocation step function every `step_s` seconds, for plotting.

    Times run from 0 (workload start) to the later of the last timeline entry and the last
    finish, end point included; `gpus[k]` is the allocation in force at `times[k]` (0 before the
    first timeline entry). Returns two float arrays of equal length (both empty with no timeline).
    """
    if step_s <= 0:
        raise ValueError(f"step_s must be > 0, got {step_s}")
    points = sorted(result.gpu_timeline, key=lambda p: p[0])
    if not points:
        return np.zeros(0), np.zeros(0)
    end = max([points[-1][0]] + [j.finish_s for j in result.jobs if j.finish_s is not None])
    n = int(math.floor(end / step_s + 1e-9)) + 1
    times = np.arange(n, dtype=float) * step_s
    if times[-1] < end:
        times = np.append(times, end)
    starts = np.array([p[0] for p in points], dtype=float)
    values = np.array([p[1] for p in points], dtype=float)
    idx = np.searchsorted(starts, times, side="right") - 1
    gpus = np.where(idx >= 0, values[np.clip(idx, 0, None)], 0.0)
    return times, gpus
