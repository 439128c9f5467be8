"""ONES and SideCar scheduler speed: one `ones` round and one `sidecar` decision at 64 GPUs.

Targets (issue 5): one `ones` round at 64 GPUs <= 100 ms median; one `sidecar` decision
<= 10 ms median.

A round is `decide` on a live simulation of the first `--jobs` jobs of workload-1 (profiles),
all arriving at time 0 so that they all contend, over the first `--rounds` rounds, on the
policy's own mechanism (in-place for ONES, SideCar's for SideCar). As in bench_pollux.py the
jobs' own throughput-model refits (done by each job's agent in a real cluster) are triggered just
before each round and timed separately; everything the policy does itself is in the round time
(ONES: its GPR retraining when a job completes, its evolution; SideCar: its pooled per-application
speed fits).

Run: python benchmarks/speed/bench_ones_sidecar.py [--rounds 40] [--jobs 160]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import POLLUX, machine, require
from bench_pollux import TimedRounds, report_rounds

from corral.core import Cluster
from corral.policies import create_policy
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.loop.mechanism import mechanism_named
from corral.sim.truth.profiles import ProfileTruth
from corral.sim.workloads import Workload, load_pollux_csv


def timed_rounds(policy: str, mechanism: str, jobs: int, rounds: int, spread_s: float) -> TimedRounds:
    truth = ProfileTruth(require(POLLUX / "profiles"))
    source = load_pollux_csv(require(POLLUX / "workloads" / "workload-1.csv"), truth.limits())
    specs = [dataclasses.replace(s, submit_time_s=spread_s * i / jobs)
             for i, s in enumerate(source.jobs[:jobs])]
    timed = TimedRounds(create_policy(policy))
    timed.promises = timed.inner.promises
    config = EngineConfig(mechanism=mechanism_named(mechanism), max_time_s=60.0 * rounds + spread_s)
    Simulator(truth, timed, Cluster.parse("16x4"), config).run(
        Workload("bench", specs, "workload-1, arrivals compressed"))
    return timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=160)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    report_rounds(f"ones round, 64 GPUs, {args.jobs} jobs at t=0",
           timed_rounds("ones", "in-place", args.jobs, args.rounds, 0.0), 0.100)
    # SideCar is called on arrivals and completions: spread the arrivals so that each call
    # schedules one incoming job against a full cluster.
    report_rounds(f"sidecar decision, 64 GPUs, {args.jobs} jobs arriving 1 per 30 s",
           timed_rounds("sidecar", "sidecar", args.jobs, args.rounds, 30.0 * args.jobs), 0.010)


if __name__ == "__main__":
    main()
