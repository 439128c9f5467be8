"""The lower bound on average JCT (`corral.sim.analysis.bound_jobs.workload_lp_bound`): its time
and tightness, from 160-job workloads to the whole Philly trace. Sections (`--only a,b`):

* `pollux` -- each of the eight shared 160-job workloads on the measured profiles and 16x4 (64
  GPUs): wall seconds of the exact LP (building the jobs' rate pieces and solving), HiGHS's own
  time, its slots and bound; then the windowed relaxation (`window_bound`) on the same jobs, its
  time, and its bound over the exact LP's (above 1: tighter). Issue 15's target: a 160-job
  workload's exact bound in under a minute.
* `day` -- Philly's busiest day (3,987 jobs) on 2,048 GPUs (512x4), catalog truth: the bound's
  time (issue 45: at most 2 minutes) and the gap of fifo and tiresias-las to it.
* `trace` -- the whole Philly trace (74,428 jobs) on 2,048 GPUs: the bound's time (issue 45: at
  most 15 minutes) and the gap of fifo and tiresias-las to it.

    python benchmarks/speed/bench_lp_bound.py [--only pollux,day,trace] [--workloads 6,8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import POLLUX, machine, require

from corral.core import Cluster
from corral.policies import create_policy
from corral.sim.analysis.bound_jobs import bound_jobs, cluster_gpus, workload_lp_bound
from corral.sim.analysis.lp_bound import DEFAULT_SLOTS, lp_lower_bound
from corral.sim.analysis.metrics import summarize
from corral.sim.analysis.window_bound import windowed_lower_bound
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.truth.profiles import ProfileTruth
from corral.sim.workloads import Workload, load_philly, load_pollux_csv

TARGET_S = 60.0  # issue 15: a 160-job workload's bound in under a minute
DAY_TARGET_S = 120.0  # issue 45: the busiest Philly day's bound in at most 2 minutes
TRACE_TARGET_S = 900.0  # issue 45: the whole trace's in at most 15
TRACE_CLUSTER = "512x4"  # 2,048 GPUs, as bench_scale.py runs the trace
GAP_POLICIES = ("fifo", "tiresias-las")


def section_pollux(workloads: str, slots: int) -> None:
    truth = ProfileTruth(require(POLLUX / "profiles"))
    cluster = Cluster.parse("16x4")
    slowest = 0.0
    for number in workloads.split(","):
        path = require(POLLUX / "workloads" / f"workload-{number.strip()}.csv")
        workload = load_pollux_csv(path, truth.limits())
        started = time.perf_counter()
        jobs = bound_jobs(workload, truth, cluster)
        exact = lp_lower_bound(jobs, cluster_gpus(cluster), slots=slots)
        took = time.perf_counter() - started
        slowest = max(slowest, took)
        windowed = windowed_lower_bound(jobs, cluster_gpus(cluster))
        print(f"  {path.stem} ({len(workload.jobs)} jobs): exact {took:.1f} s "
              f"(HiGHS {exact.solve_s:.1f} s, {exact.slots} slots), bound avg JCT "
              f"{exact.avg_jct_s:.0f} s; windowed {windowed.solve_s:.1f} s "
              f"({windowed.slot_s:.0f} s slots) {windowed.avg_jct_s:.0f} s, "
              f"{windowed.avg_jct_s / exact.avg_jct_s:.3f}x the exact LP", flush=True)
    verdict = "met" if slowest <= TARGET_S else "NOT met"
    print(f"slowest exact: {slowest:.1f} s (target <= {TARGET_S:.0f} s: {verdict})")


def section_philly(label: str, workload: Workload, target_s: float) -> None:
    truth = CatalogTruth()
    cluster = Cluster.parse(TRACE_CLUSTER)
    started, cpu = time.perf_counter(), time.process_time()
    bound = workload_lp_bound(workload, truth, cluster)
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    verdict = "met" if took <= target_s else "NOT met"
    print(f"  {label} ({len(workload.jobs)} jobs, {TRACE_CLUSTER}): {bound.method} bound "
          f"{bound.avg_jct_s:.0f} s in {took:.1f} s, {cpu:.1f} s CPU ({bound.slot_s:.0f} s "
          f"slots; target <= {target_s:.0f} s: {verdict})", flush=True)
    for name in GAP_POLICIES:
        started = time.perf_counter()
        s = summarize(Simulator(truth, create_policy(name), cluster).run(workload))
        jct = s.avg_jct_s if s.avg_jct_s is not None else float("nan")
        print(f"    {name}: avg JCT {jct:.0f} s, gap {jct / bound.avg_jct_s:.3f} "
              f"({time.perf_counter() - started:.0f} s to simulate)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="pollux,day,trace", help="sections: pollux, day, trace")
    ap.add_argument("--workloads", default="1,2,3,4,5,6,7,8", help="shared workload numbers")
    ap.add_argument("--slots", type=int, default=DEFAULT_SLOTS, help="the exact LP's time slots")
    args = ap.parse_args()
    only = set(args.only.split(","))
    print(machine())
    if "pollux" in only:
        section_pollux(args.workloads, args.slots)
    limits = CatalogTruth().limits()
    if "day" in only:
        day = load_philly(require(POLLUX / "philly.csv"), limits, start=None, hours=24)
        section_philly("busiest Philly day", day, DAY_TARGET_S)
    if "trace" in only:
        whole = load_philly(require(POLLUX / "philly.csv"), limits, start=0, hours=None)
        section_philly("whole Philly trace", whole, TRACE_TARGET_S)


if __name__ == "__main__":
    main()
