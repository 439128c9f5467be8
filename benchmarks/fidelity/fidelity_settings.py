"""Our simulator against the Pollux artifact's held-out results at other settings.

The artifact (petuum/adaptdl, branch osdi21-artifact, `simulator/`) published results at
settings the shared data does not cover: job loads of 0.5x-2x (`results-jobload/`, on
`workloads-<load>/`), scheduling intervals (`results-period/`) and interference slowdowns
(`results-inter/`, interference avoidance off: `noavoid` without slowdown, `inter25`/`inter50`
with 25 % / 50 %), both on the 1x `workloads/`. Those files are not part of this project;
fetch the artifact's `simulator/` directory and name it:

    python benchmarks/fidelity/fidelity_settings.py /path/to/adaptdl/simulator [--only optimus-0.5]

For each setting it runs our policy on the same workloads (16x4 cluster, the shared measured
profiles) and prints each workload's average JCT beside the reference's, the mean of the
averages and its error, and the per-application mean JCT error (which jobs carry the gap).
Run it at two commits for a before/after comparison. Without the directory it says so and
stops (exit status 0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import POLLUX, machine, require

from corral.core import Cluster
from corral.policies import create_policy
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.truth.profiles import ProfileTruth
from corral.sim.workloads import Workload, load_pollux_csv


@dataclass(frozen=True)
class Setting:
    """One held-out reference result and how to run ours at the same setting."""

    name: str
    policy: str
    workloads: str  # directory of the artifact's workload CSVs
    summary: str  # the artifact's summary.json, relative to its simulator/ directory
    overrides: dict[str, str] = field(default_factory=dict)
    interval_s: float = 60.0
    interference: float = 0.0


NO_AVOIDANCE = {"interference_avoidance": "false"}

SETTINGS: tuple[Setting, ...] = (
    Setting("optimus-0.5", "optimus-oracle", "workloads-0.5",
            "results-jobload/optimus-0.5/summary.json"),
    Setting("pollux-4m", "pollux", "workloads", "results-period/pollux-4m/summary.json",
            interval_s=240.0),
    Setting("pollux-8m", "pollux", "workloads", "results-period/pollux-8m/summary.json",
            interval_s=480.0),
    # The artifact's inter* runs had interference avoidance switched off (its README: lines
    # 387-390 of pollux.py commented out); with it on, no job is ever slowed.
    Setting("pollux-noavoid", "pollux", "workloads", "results-inter/noavoid/summary.json",
            overrides=NO_AVOIDANCE),
    Setting("pollux-inter25", "pollux", "workloads", "results-inter/inter25/summary.json",
            overrides=NO_AVOIDANCE, interference=0.25),
    Setting("pollux-inter50", "pollux", "workloads", "results-inter/inter50/summary.json",
            overrides=NO_AVOIDANCE, interference=0.5),
)


@dataclass
class Comparison:
    """Per-workload average JCTs and per-application JCT lists, ours and the reference's."""

    ours_avg: dict[str, float] = field(default_factory=dict)
    ref_avg: dict[str, float] = field(default_factory=dict)
    ours_app: dict[str, list[float]] = field(default_factory=dict)
    ref_app: dict[str, list[float]] = field(default_factory=dict)

    def add(self, workload: Workload, ours: dict[str, float], ref: dict[str, float]) -> None:
        """Record one workload's per-job JCTs (jobs the reference did not finish are left out)."""
        apps = {j.name: j.app for j in workload.jobs}
        shared = [n for n in ours if n in ref]
        self.ours_avg[workload.name] = statistics.mean(ours.values())
        self.ref_avg[workload.name] = statistics.mean(ref.values())
        for name in shared:
            self.ours_app.setdefault(apps[name], []).append(ours[name])
            self.ref_app.setdefault(apps[name], []).append(ref[name])


def run_setting(setting: Setting, root: Path, truth: ProfileTruth, limit: int) -> Comparison:
    """Run ours on the setting's workloads and pair each with the reference's JCTs."""
    ref = json.loads((root / setting.summary).read_text())["jcts"]
    config = EngineConfig(interval_s=setting.interval_s,
                          interference_slowdown=setting.interference)
    out = Comparison()
    for name in sorted(ref, key=lambda w: int(w.rsplit("-", 1)[-1]))[:limit]:
        workload = load_pollux_csv(root / setting.workloads / f"{name}.csv", truth.limits())
        policy = create_policy(setting.policy, dict(setting.overrides))
        result = Simulator(truth, policy, Cluster.uniform(16, 4), config).run(workload)
        out.add(workload, {j.name: j.finish_s - j.submit_s for j in result.jobs
                           if j.finish_s is not None}, ref[name])
    return out


def error(ours: float, ref: float) -> str:
    return f"{ours / ref - 1:+7.1%}"


def report(setting: Setting, cmp: Comparison, wall_s: float) -> None:
    """Print the setting's per-workload, mean and per-application comparison."""
    print(f"\n== {setting.name}: {setting.policy} interval {setting.interval_s:.0f} s, "
          f"interference {setting.interference:.0%}  ({setting.summary})")
    print(f"{'workload':12s} {'ours':>8s} {'reference':>10s} {'error':>7s}")
    for name, ours in cmp.ours_avg.items():
        print(f"{name:12s} {ours:8.0f} {cmp.ref_avg[name]:10.0f} {error(ours, cmp.ref_avg[name])}")
    mean, ref = statistics.mean(cmp.ours_avg.values()), statistics.mean(cmp.ref_avg.values())
    print(f"{'mean':12s} {mean:8.0f} {ref:10.0f} {error(mean, ref)}")
    print("per application, mean JCT ours / reference (error): " + ", ".join(
        f"{app} {statistics.mean(cmp.ours_app[app]):.0f}/{statistics.mean(cmp.ref_app[app]):.0f}"
        f" ({error(statistics.mean(cmp.ours_app[app]), statistics.mean(cmp.ref_app[app])).strip()})"
        for app in sorted(cmp.ours_app)))
    print(f"wall time: {wall_s:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("artifact", type=Path, nargs="?",
                    help="the artifact's simulator/ directory (workloads-*/, results-*/)")
    ap.add_argument("--only", default="", help="comma-separated setting names: "
                    + ", ".join(s.name for s in SETTINGS))
    ap.add_argument("--workloads", type=int, default=8, help="first N workloads of each setting")
    args = ap.parse_args()
    if args.artifact is None or not (args.artifact / "results-jobload").is_dir():
        print(f"skipped: no artifact results directory given or found ({args.artifact}); "
              "fetch petuum/adaptdl@osdi21-artifact simulator/ and pass its path")
        return
    wanted = {s for s in args.only.split(",") if s}
    unknown = wanted - {s.name for s in SETTINGS}
    if unknown:
        sys.exit(f"unknown setting(s): {', '.join(sorted(unknown))}")
    print(f"machine: {machine()}")
    truth = ProfileTruth(require(POLLUX / "profiles"))
    for setting in SETTINGS:
        if wanted and setting.name not in wanted:
            continue
        started = time.perf_counter()
        cmp = run_setting(setting, args.artifact, truth, args.workloads)
        report(setting, cmp, time.perf_counter() - started)


if __name__ == "__main__":
    main()
