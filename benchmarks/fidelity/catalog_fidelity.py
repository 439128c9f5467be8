"""How far the built-in catalog is from the measured profiles it was fitted to.

Prints per-model step-time and efficiency errors of the catalog, and the mean average JCT of a
policy on the eight shared workloads simulated on the profiles vs on the catalog.
Run: python benchmarks/fidelity/catalog_fidelity.py [--policy fifo]
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import POLLUX, require

from corral.core import Cluster
from corral.policies import create_policy
from corral.sim.analysis.metrics import summarize
from corral.sim.loop.engine import Simulator
from corral.sim.truth.calibrate import fidelity
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.truth.profiles import ProfileTruth
from corral.sim.workloads import load_workloads


def mean_avg_jct(truth, policy: str) -> tuple[float, list[float]]:
    workloads = load_workloads(require(POLLUX / "workloads"), truth.limits())
    avgs = [summarize(Simulator(truth, create_policy(policy), Cluster.parse("16x4")).run(w)).avg_jct_s
            for w in workloads]
    return sum(avgs) / len(avgs), avgs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--policy", default="fifo")
    args = ap.parse_args()
    profiles = require(POLLUX / "profiles")
    catalog_doc = json.loads(resources.files("corral.data").joinpath("catalog.json").read_text())
    print(f"{'model':12s} {'step err mean':>14s} {'step err max':>13s} {'eff err mean':>13s} {'eff err max':>12s}")
    for model, e in fidelity(catalog_doc, profiles).items():
        print(f"{model:12s} {e['step_time_mre']:14.1%} {e['step_time_max_re']:13.1%} "
              f"{e['efficiency_mre']:13.1%} {e['efficiency_max_re']:12.1%}")
    on_profiles, per_p = mean_avg_jct(ProfileTruth(profiles), args.policy)
    on_catalog, per_c = mean_avg_jct(CatalogTruth(), args.policy)
    print(f"{args.policy}: mean average JCT over 8 workloads: profiles {on_profiles:.0f} s, "
          f"catalog {on_catalog:.0f} s ({on_catalog / on_profiles - 1:+.1%})")
    for i, (p, c) in enumerate(zip(per_p, per_c), start=1):
        print(f"  workload-{i}: profiles {p:.0f} s, catalog {c:.0f} s ({c / p - 1:+.1%})")


if __name__ == "__main__":
    main()
