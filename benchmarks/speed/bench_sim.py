"""Simulator speed: a 160-job workload under fifo, and a 10,000-job Philly window on 1,024 GPUs.

Targets (issue 2): 160 jobs under 5 s; 10,000 jobs on 1,024 GPUs under 60 s.
Run: python benchmarks/speed/bench_sim.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import POLLUX, machine, require

from corral.core import Cluster
from corral.policies import create_policy
from corral.sim.analysis.metrics import summarize
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.truth.profiles import ProfileTruth
from corral.sim.workloads import load_philly, load_pollux_csv


def timed(truth, policy: str, cluster: str, workload) -> tuple[float, object]:
    started = time.perf_counter()
    result = Simulator(truth, create_policy(policy), Cluster.parse(cluster)).run(workload)
    return time.perf_counter() - started, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=10_000)
    args = ap.parse_args()
    print(f"machine: {machine()}")

    truth = ProfileTruth(require(POLLUX / "profiles"))
    workload = load_pollux_csv(require(POLLUX / "workloads" / "workload-1.csv"), truth.limits())
    for policy in ("fifo", "srtf"):
        times = [timed(truth, policy, "16x4", workload)[0] for _ in range(args.repeat)]
        print(f"{policy:5s} 160 jobs, 64 GPUs (profiles): first run {times[0]:.3f} s (cold caches), "
              f"median {statistics.median(times):.3f} s over {args.repeat} runs "
              f"(target 5 s: {5 / max(times):.0f}x under at worst)")

    catalog = CatalogTruth()
    philly = load_philly(require(POLLUX / "philly.csv"), catalog.limits(), start=None,
                         hours=24 * 30, max_jobs=args.jobs)
    span_h = philly.jobs[-1].submit_time_s / 3600
    wall, result = timed(catalog, "fifo", "256x4", philly)
    s = summarize(result)
    print(f"fifo  {len(philly.jobs)} Philly jobs over {span_h:.0f} h, 1024 GPUs (catalog): {wall:.1f} s "
          f"(target 60 s: {60 / wall:.1f}x under); {result.rounds} rounds, avg JCT {s.avg_jct_s:.0f} s, "
          f"{s.unfinished} unfinished")


if __name__ == "__main__":
    main()
