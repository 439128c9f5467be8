"""Fitting accuracy of the Pollux throughput model (Eq. 8-12) on the six measured profiles.

For each model in `shared/data/pollux/profiles`, fits the seven parameters (RMSLE, L-BFGS-B,
no exploration priors) to every measured step time (placements.csv and scalability.csv) and
prints the mean and max relative error of the predicted step time over those measurements
(the paper, §3.2: at most 10% average error for every task). With --online it also reports the
error of the models the jobs fitted online from their own observations at the end of a Pollux
simulation (on the configurations each job ran), next to the error of those same models on
every measured configuration (extrapolation).

Run: python benchmarks/fidelity/pollux_model_fit.py [--online 1]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import POLLUX, machine, require

from corral.perf.throughput import fit_throughput, iteration_time


def measured(app_dir: Path) -> np.ndarray:
    """Rows (nodes, GPUs, per-GPU batch, step_s, sync_s) of placements.csv and scalability.csv."""
    rows = []
    with (app_dir / "placements.csv").open(newline="") as fh:
        for r in csv.DictReader(fh):
            counts = [int(c) for c in r["placement"]]
            rows.append((len(counts), sum(counts), float(r["local_bsz"]), float(r["step_time"]),
                         float(r["sync_time"])))
    with (app_dir / "scalability.csv").open(newline="") as fh:
        for r in csv.DictReader(fh):
            rows.append((float(r["num_nodes"]), float(r["num_replicas"]), float(r["local_bsz"]),
                         float(r["step_time"]), float(r["sync_time"])))
    return np.array(rows)


def rel_errors(params, rows: np.ndarray) -> np.ndarray:
    pred = np.asarray(iteration_time(params, rows[:, 0], rows[:, 1], rows[:, 2], 0))
    return np.abs(pred - rows[:, 3]) / rows[:, 3]


def offline(root: Path) -> dict[str, np.ndarray]:
    print("throughput model fitted to all measurements (relative error of step time)")
    print(f"{'model':12s} {'points':>6s} {'mean':>7s} {'median':>7s} {'p90':>7s} {'max':>7s}")
    tables = {}
    for app_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        rows = measured(app_dir)
        tables[app_dir.name] = rows
        params = fit_throughput(*rows.T, prior_driven=False)
        err = rel_errors(params, rows)
        print(f"{app_dir.name:12s} {len(rows):6d} {err.mean():7.1%} {np.median(err):7.1%} "
              f"{np.percentile(err, 90):7.1%} {err.max():7.1%}")
    return tables


def online(root: Path, tables: dict[str, np.ndarray], workload_no: str) -> None:
    import corral.sim.loop.engine as engine
    from corral.core import Cluster
    from corral.policies import create_policy
    from corral.sim.loop.engine import Simulator
    from corral.sim.truth.profiles import ProfileTruth
    from corral.sim.workloads import load_pollux_csv

    truth = ProfileTruth(root)
    workload = load_pollux_csv(require(POLLUX / "workloads" / f"workload-{workload_no}.csv"),
                               truth.limits())
    estimators = []
    release = engine.SimJob.release

    def keep(job):  # collect each job's estimator as it completes
        estimators.append((job.spec.app, job.estimator))
        release(job)

    engine.SimJob.release = keep
    try:
        Simulator(truth, create_policy("pollux"), Cluster.parse("16x4")).run(workload)
    finally:
        engine.SimJob.release = release
    own, every = defaultdict(list), defaultdict(list)
    for app, est in estimators:
        params = est.throughput_params()
        if params is None:
            continue
        prof = est.profile()
        seen = np.array([(n, k, m, step, sync) for (n, k, m), (_, step, sync) in prof.items()])
        own[app].append(rel_errors(params, seen).mean())
        every[app].append(rel_errors(params, tables[app]).mean())
    print(f"online fits of {workload.name}'s jobs (mean relative step-time error per job, "
          f"averaged over jobs)")
    print(f"{'model':12s} {'jobs':>5s} {'on own configs':>15s} {'on all measured':>16s}")
    for app in sorted(own):
        print(f"{app:12s} {len(own[app]):5d} {statistics.mean(own[app]):15.1%} "
              f"{statistics.mean(every[app]):16.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--online", metavar="N", help="also simulate workload-N and score its fits")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    root = require(POLLUX / "profiles")
    tables = offline(root)
    if args.online:
        online(root, tables, args.online)


if __name__ == "__main__":
    main()
