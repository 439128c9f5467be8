"""The Tiresias paper's simulation comparison (§5.3, Table 5) on a Philly-derived workload.

Tiresias-L (2D-LAS) and Tiresias-G (2D-Gittins), 2 queues with a 1 GPU-hour threshold and
PromoteKnob off, against `fifo` (YARN-CS: FIFO with head-of-line blocking, consolidated
placement) and `fifo backfill=true` (the paper's "Best-effort"), on the busiest 8-hour window of
../shared/data/pollux/philly.csv (jobs keep the trace's GPU counts; each job's model comes
from its GPU-time class, and its run time from the measured profiles). The paper reports
Tiresias-L's average JCT 2.4x lower than YARN-CS's and 1.5x lower than Best-effort's, median
30.8x / 9x, Tiresias-G slightly better than L on average.

Gittins is run twice: with the distribution learned from jobs completed so far, and with the
Tiresias simulator's production GPU-time samples (../shared/data/tiresias/yarn-gput10000.csv).

Two versions of the workload: "profiles" (each job trains its model's full run, as the Pollux
workloads do, so durations are those of six models, not the trace's) and "trace-length" (each
job stops after the epochs that make its GPU-time closest to the trace's, at most its model's
full run: the paper's simulator replayed the trace's durations).

Run: python benchmarks/fidelity/tiresias_philly.py [--cluster 32x4 ...] [--hours 8]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import POLLUX, SHARED, machine, require

from corral.core import Cluster
from corral.policies import create_policy
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.truth.profiles import ProfileTruth
from corral.sim.truth.replay import packed_counts, remaining_at
from corral.sim.workloads import Workload, load_philly

PAPER = {"threshold_gpu_h": "1"}


def trace_length(workload: Workload, truth: ProfileTruth, gpus_per_node: int) -> Workload:
    """Each job shortened to the epochs whose GPU-time is closest to its trace GPU-time."""
    jobs = []
    for spec in workload.jobs:
        app = truth.app(spec.app)
        full = app.limits.epochs
        secs, _ = remaining_at(app, packed_counts(spec.gpus, gpus_per_node),
                               spec.user_batch(spec.gpus), full, 0, 0.0)
        target = workload.trace_gpu_s[spec.name] / (secs * spec.gpus)
        jobs.append(dataclasses.replace(spec, epochs=max(1, min(full, round(full * target)))))
    return Workload(f"{workload.name}-trace-length", jobs, source=workload.source + " trace-length")


def compare(truth: ProfileTruth, workload: Workload, cluster: Cluster, yarn) -> None:
    runs = [
        ("YARN-CS (fifo)", "fifo", {}),
        ("Best-effort (fifo backfill)", "fifo", {"backfill": "true"}),
        ("Tiresias-L", "tiresias-las", PAPER),
        ("Tiresias-G (learned)", "tiresias-gittins", PAPER),
        ("Tiresias-G (yarn-gput10000)", "tiresias-gittins", {**PAPER, "distribution": str(yarn)}),
    ]
    print(f"\n== {workload.name}: {len(workload)} jobs on {cluster.describe()} "
          f"({cluster.total_gpus} GPUs)")
    rows = []
    for label, policy, overrides in runs:
        started = time.perf_counter()
        result = Simulator(truth, create_policy(policy, overrides), cluster,
                           EngineConfig(max_time_s=400 * 86400)).run(workload)
        wall = time.perf_counter() - started
        jcts = sorted(j.finish_s - j.submit_s for j in result.jobs if j.finish_s is not None)
        unfinished = sum(j.finish_s is None for j in result.jobs)
        rows.append((label, statistics.mean(jcts), statistics.median(jcts),
                     jcts[int(0.95 * (len(jcts) - 1))], unfinished, wall))
    base = next(r for r in rows if r[0] == "Tiresias-L")
    print(f"{'policy':30s} {'avg JCT':>9s} {'median':>8s} {'p95':>9s}  "
          f"{'avg/L':>6s} {'median/L':>8s} {'unfinished':>10s} {'wall':>6s}")
    for label, avg, med, p95, unfinished, wall in rows:
        print(f"{label:30s} {avg:9.0f} {med:8.0f} {p95:9.0f}  {avg / base[1]:6.2f} "
              f"{med / base[2]:8.2f} {unfinished:10d} {wall:5.1f}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cluster", nargs="+", default=["32x4"])
    ap.add_argument("--hours", type=float, default=8.0)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    truth = ProfileTruth(require(POLLUX / "profiles"))
    yarn = require(SHARED / "tiresias" / "yarn-gput10000.csv")
    workload = load_philly(require(POLLUX / "philly.csv"), truth.limits(), hours=args.hours)
    for text in args.cluster:
        cluster = Cluster.parse(text)
        for w in (workload, trace_length(workload, truth, cluster.max_node_gpus)):
            compare(truth, w, cluster, yarn)
    print("\n(avg/L, median/L: the paper's factor of improvement of Tiresias-L; "
          "paper, Table 5: YARN-CS 2.4 / 30.8, Best-effort 1.5 / 9)")


if __name__ == "__main__":
    main()
