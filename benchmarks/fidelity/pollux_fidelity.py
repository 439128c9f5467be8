"""Pollux fidelity: corral's `pollux` on the eight artifact workloads vs the reference simulator.

Runs the policy (interval 60 s, restart delay 30 s, p = -1 unless --set says otherwise) on
workload-1..8 with the measured profiles and prints, per workload, the average JCT next to the
reference's (`shared/data/pollux/reference/pollux-load1.0.json`), their mean, and the average
JCT per application over all workloads (both sides, same jobs) to show where differences come
from. With --fairness it also runs p = 1, -1, -10 and prints average / p99 JCT, makespan and
finish-time fairness (p99, max), means over the workloads.

Run: python benchmarks/fidelity/pollux_fidelity.py [--workloads 1,2,...] [--set pollux.p=-1 ...]
     python benchmarks/fidelity/pollux_fidelity.py --fairness
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import POLLUX, machine, require

from corral.core import Cluster
from corral.policies import create_policy
from corral.sim.analysis.metrics import mean_summary, summarize
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.loop.mechanism import CheckpointRestart
from corral.sim.truth.profiles import ProfileTruth
from corral.sim.workloads import load_pollux_csv

print = functools.partial(print, flush=True)  # noqa: A001 (progress shows while it runs)


def run(truth, workloads, overrides: dict[str, str]):
    config = EngineConfig(interval_s=60.0, mechanism=CheckpointRestart(30.0))
    out = []
    for workload in workloads:
        started = time.perf_counter()
        cpu = time.process_time()
        result = Simulator(truth, create_policy("pollux", overrides), Cluster.parse("16x4"),
                           config).run(workload)
        out.append((workload, result, time.perf_counter() - started, time.process_time() - cpu))
    return out


def fidelity(truth, workloads, overrides: dict[str, str]) -> None:
    ref = json.loads(require(POLLUX / "reference" / "pollux-load1.0.json").read_text())
    print(f"pollux {overrides or ''} vs reference simulator (avg JCT, s)")
    print(f"{'workload':12s} {'corral':>8s} {'reference':>10s} {'diff':>7s} {'restarts/job':>13s} "
          f"{'wall s':>7s} {'cpu s':>6s}")
    ours, theirs = [], []
    per_app: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for workload, result, wall, cpu in run(truth, workloads, overrides):
        s = summarize(result)
        r = ref["avgs"][workload.name]
        ours.append(s.avg_jct_s)
        theirs.append(r)
        print(f"{workload.name:12s} {s.avg_jct_s:8.0f} {r:10.0f} {s.avg_jct_s / r - 1:+7.1%} "
              f"{s.restarts_per_job:13.2f} {wall:7.1f} {cpu:6.1f}")
        ref_jcts = ref["jcts"][workload.name]
        for job in result.jobs:
            if job.jct_s is not None and job.name in ref_jcts:
                per_app[job.app].append((job.jct_s, ref_jcts[job.name]))
    m_ours, m_ref = statistics.mean(ours), statistics.mean(theirs)
    print(f"{'mean':12s} {m_ours:8.0f} {m_ref:10.0f} {m_ours / m_ref - 1:+7.1%}")
    print("per application, all workloads (avg JCT, s):")
    for app in sorted(per_app):
        pairs = per_app[app]
        a = statistics.mean(p[0] for p in pairs)
        b = statistics.mean(p[1] for p in pairs)
        print(f"  {app:12s} jobs {len(pairs):4d}  corral {a:8.0f}  reference {b:8.0f}  "
              f"{a / b - 1:+7.1%}")


def fairness(truth, workloads) -> None:
    print("fairness knob (means over workloads): avg JCT, p99 JCT, makespan (s), FTF p99, FTF max")
    for p in ("1", "-1", "-10"):
        sums = [summarize(r) for _, r, _, _ in run(truth, workloads, {"p": p})]
        m = mean_summary(sums)
        print(f"  p={p:>4s}: avg {m['avg_jct_s']:7.0f}  p99 {m['p99_jct_s']:7.0f}  makespan "
              f"{m['makespan_s']:7.0f}  FTF p99 {m['ftf_p99']:5.2f}  FTF max {m['ftf_max']:5.2f}  "
              f"restarts/job {m['restarts_per_job']:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workloads", default="1,2,3,4,5,6,7,8")
    ap.add_argument("--set", dest="settings", action="append", default=[],
                    help="pollux parameter NAME=VALUE (repeatable)")
    ap.add_argument("--fairness", action="store_true", help="run p = 1, -1, -10")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    truth = ProfileTruth(require(POLLUX / "profiles"))
    workloads = [load_pollux_csv(require(POLLUX / "workloads" / f"workload-{w.strip()}.csv"),
                                 truth.limits()) for w in args.workloads.split(",") if w.strip()]
    overrides = dict(s.removeprefix("pollux.").split("=", 1) for s in args.settings)
    if args.fairness:
        fairness(truth, workloads)
    else:
        fidelity(truth, workloads, overrides)


if __name__ == "__main__":
    main()
