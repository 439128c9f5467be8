"""Tiresias and Optimus against the Pollux artifact's baselines on its eight workloads.

Runs, on the 16x4 cluster with the shared profiles:
* tiresias-las as the artifact's "Tiresias+TunedJobs" (2 queues, 16 GPU-hours, PromoteKnob off,
  consolidated placement, FIFO by arrival) and with the paper's defaults for the rest
  (FIFO by first start, skew-based placement);
* optimus-oracle ("Optimus+Oracle+TunedJobs") and the online optimus;
and prints each workload's average JCT beside ../shared/data/pollux/reference/*-load1.0.json,
the mean of the averages (targets: 4038 s and 5682 s, +-10%), the per-application mean JCT
against the reference's per-job JCTs, and the wall time of each 8-workload run.

Run: python benchmarks/fidelity/baselines_fidelity.py [--only tiresias|optimus]
"""

from __future__ import annotations

import argparse
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
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.truth.profiles import ProfileTruth
from corral.sim.workloads import load_workloads

ARTIFACT_TIRESIAS = {"threshold_gpu_h": "16", "placement": "consolidate", "fifo_key": "arrival"}
RUNS = [
    ("tiresias", "tiresias-las", ARTIFACT_TIRESIAS, "tiresias"),
    ("tiresias", "tiresias-las", {"threshold_gpu_h": "16"}, "tiresias"),
    ("optimus", "optimus-oracle", {}, "optimus"),
    ("optimus", "optimus", {}, "optimus"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", choices=["tiresias", "optimus"])
    args = ap.parse_args()
    print(f"machine: {machine()}")
    truth = ProfileTruth(require(POLLUX / "profiles"))
    workloads = load_workloads(require(POLLUX / "workloads"), truth.limits())
    apps = {w.name: {j.name: j.app for j in w.jobs} for w in workloads}
    for family, policy, overrides, ref_name in RUNS:
        if args.only and family != args.only:
            continue
        ref = json.loads(require(POLLUX / "reference" / f"{ref_name}-load1.0.json").read_text())
        label = policy + "".join(f" {k}={v}" for k, v in overrides.items())
        print(f"\n== {label}  (reference: {ref_name}-load1.0.json)")
        started = time.perf_counter()
        avgs: dict[str, float] = {}
        per_app: dict[str, list[float]] = defaultdict(list)
        ref_app: dict[str, list[float]] = defaultdict(list)
        for w in workloads:
            result = Simulator(truth, create_policy(policy, overrides), Cluster.uniform(16, 4),
                               EngineConfig()).run(w)
            jcts = {j.name: j.finish_s - j.submit_s for j in result.jobs}
            avgs[w.name] = statistics.mean(jcts.values())
            for name, jct in jcts.items():
                per_app[apps[w.name][name]].append(jct)
            for name, jct in ref["jcts"][w.name].items():
                ref_app[apps[w.name][name]].append(jct)
        wall = time.perf_counter() - started
        print(f"{'workload':12s} {'ours':>8s} {'reference':>10s} {'diff':>7s}")
        for name, ours in avgs.items():
            r = ref["avgs"][name]
            print(f"{name:12s} {ours:8.0f} {r:10.0f} {ours / r - 1:+7.1%}")
        mean = statistics.mean(avgs.values())
        print(f"{'mean':12s} {mean:8.0f} {ref['mean']:10.0f} {mean / ref['mean'] - 1:+7.1%}"
              f"   (within +-10%: {abs(mean / ref['mean'] - 1) <= 0.10})")
        print("per application, mean JCT (s), ours / reference: " + ", ".join(
            f"{a} {statistics.mean(per_app[a]):.0f}/{statistics.mean(ref_app[a]):.0f}"
            for a in sorted(per_app)))
        print(f"wall time, 8 workloads: {wall:.1f} s")


if __name__ == "__main__":
    main()
