"""Pollux scheduler speed: one round at 64 GPUs / 160 jobs, one at 1,024 GPUs / 1,000 jobs, and
whole 160-job simulations.

Targets (issue 3): a round at 64 GPUs / 160 jobs <= 50 ms median (the paper: ~1 s on one vCPU);
at 1,024 GPUs / 1,000 jobs <= 1 s; a whole 160-job Pollux simulation <= 60 s (the reference
simulator: ~30 min).

A "round" is `Pollux.decide` on a live simulation in which all jobs arrive at time 0 (so all
of them are active and contend), timed over the first `--rounds` rounds, the first (cold, no
warm start, every job new) excluded from the median. The jobs' own model
refits (the agents' work, done in the jobs' processes in a real cluster) are triggered just
before each round and timed separately.

Run: python benchmarks/speed/bench_pollux.py [--rounds 20] [--workloads 1,6]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import POLLUX, machine, require
from bench_sim import timed

from corral.core import Cluster
from corral.core.jobs import Decision, Snapshot
from corral.core.policy import Policy
from corral.policies import create_policy
from corral.sim.analysis.metrics import summarize
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.truth.profiles import ProfileTruth
from corral.sim.workloads import Workload, load_pollux_csv, synthetic


class TimedRounds(Policy):
    """Wraps a policy: refreshes every job's fitted model, then times `decide`."""

    name = "timed"

    def __init__(self, inner: Policy) -> None:
        super().__init__(inner.params)
        self.inner = inner
        self.promises = inner.promises
        self.round_s: list[float] = []
        self.fit_s: list[float] = []
        self.generations: list[int] = []
        self.jobs: list[int] = []

    def decide(self, snapshot: Snapshot) -> Decision:
        started = time.perf_counter()
        for view in snapshot.jobs:
            if view.estimator is not None:
                view.estimator.goodput_fn()
        fitted = time.perf_counter()
        decision = self.inner.decide(snapshot)
        self.fit_s.append(fitted - started)
        self.round_s.append(time.perf_counter() - fitted)
        self.generations.append(getattr(self.inner, "last_generations", 0))
        self.jobs.append(len(snapshot.jobs))
        return decision


def rounds(truth, cluster: str, workload: Workload, num_rounds: int) -> TimedRounds:
    """Time `pollux` rounds on `workload` with every job submitted at time 0."""
    at_zero = Workload(workload.name, [dataclasses.replace(j, submit_time_s=0.0)
                                       for j in workload.jobs], workload.source + ", all at t=0")
    wrapper = TimedRounds(create_policy("pollux"))
    config = EngineConfig(max_time_s=60.0 * num_rounds)
    Simulator(truth, wrapper, Cluster.parse(cluster), config).run(at_zero)
    return wrapper


def report_rounds(label: str, timed: TimedRounds, target_s: float) -> None:
    steady = timed.round_s[1:] or timed.round_s  # the first round has no warm start
    med = statistics.median(steady)
    print(f"{label}: median round {med * 1e3:.1f} ms, max {max(steady) * 1e3:.1f} ms, first "
          f"{timed.round_s[0] * 1e3:.1f} ms over {len(timed.round_s)} rounds "
          f"(jobs active {min(timed.jobs)}-{max(timed.jobs)}, generations median "
          f"{statistics.median(timed.generations):.0f}); agents' refits median "
          f"{statistics.median(timed.fit_s) * 1e3:.1f} ms/round; target {target_s * 1e3:.0f} ms: "
          f"{target_s / med:.1f}x under")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--workloads", default="1,6", help="which workload-N.csv to simulate whole")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    truth = ProfileTruth(require(POLLUX / "profiles"))
    first = load_pollux_csv(require(POLLUX / "workloads" / "workload-1.csv"), truth.limits())
    report_rounds("64 GPUs / 160 jobs (workload-1 at t=0, profiles)",
                  rounds(truth, "16x4", first, args.rounds), 0.050)
    catalog = CatalogTruth()
    big = synthetic(catalog.limits(), num_jobs=1000, rate_per_hour=1000, seed=2)
    report_rounds("1024 GPUs / 1000 jobs (synthetic at t=0, catalog)",
                  rounds(catalog, "256x4", big, max(3, args.rounds // 2)), 1.0)
    for w in [w.strip() for w in args.workloads.split(",") if w.strip()]:
        workload = load_pollux_csv(require(POLLUX / "workloads" / f"workload-{w}.csv"),
                                   truth.limits())
        cpu = time.process_time()
        wall, result = timed(truth, "pollux", "16x4", workload)
        cpu = time.process_time() - cpu
        s = summarize(result)
        print(f"whole simulation {workload.name} ({len(workload.jobs)} jobs, {result.rounds} "
              f"rounds): {wall:.1f} s wall, {cpu:.1f} s CPU, avg JCT {s.avg_jct_s:.0f} s; "
              f"target 60 s: {60 / wall:.1f}x under")


if __name__ == "__main__":
    main()
