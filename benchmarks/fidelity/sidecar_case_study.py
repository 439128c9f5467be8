"""Print the SideCar 4-GPU case study as simulated (the runs of
tests/policies/test_sidecar_case_study.py) against the paper's Fig. 4, and how the termination
run moves with the donor's restart time after a termination-based shrink (the one overhead the
paper's text does not give; `corral.perf.overheads` solves it from the termination timeline).

Run: python benchmarks/fidelity/sidecar_case_study.py
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

from corral.core import Cluster
from corral.perf.overheads import OVERHEADS
from corral.policies import create_policy
from corral.sim.analysis.metrics import summarize
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.loop.mechanism import Mechanism
from corral.sim.workloads import Workload

_TEST = Path(__file__).resolve().parents[2] / "tests" / "policies" / "test_sidecar_case_study.py"


def _case_module():
    spec = importlib.util.spec_from_file_location("sidecar_case_study", _TEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    cs = _case_module()
    approaches = {"sidecar": ("sidecar", "sidecar", {"gpu_counts": "1,2,4"}),
                  "termination": ("sidecar", "termination", {"gpu_counts": "1,2,4"}),
                  "default": ("fifo", "termination", {"backfill": True})}
    print(f"{'approach':12s} {'makespan':>9s} {'paper':>6s} {'error':>7s} {'avg JCT':>8s} "
          f"{'paper':>6s} {'error':>7s}  finishes")
    for name, (policy, mechanism, params) in approaches.items():
        jobs, s = cs.run(policy, mechanism, **params)
        makespan, avg = cs.PAPER[name]
        finishes = ", ".join(f"{j.name} {j.finish_s:.0f} s" for j in jobs.values())
        print(f"{name:12s} {s.makespan_s:9.1f} {makespan:6.0f} {s.makespan_s / makespan - 1:+7.1%} "
              f"{s.avg_jct_s:8.1f} {avg:6.1f} {s.avg_jct_s / avg - 1:+7.1%}  {finishes}")
    print("\ntermination run vs the donor's restart time after a termination-based shrink:")
    for shrink_s in (OVERHEADS["termination"].shrink_s, 150.0, 204.0):
        mech = Mechanism(dataclasses.replace(OVERHEADS["termination"], shrink_s=shrink_s))
        workload = Workload("table-1", [cs.job("job1", 0.0, 4), cs.job("job2", 180.0, 2)], "")
        result = Simulator(cs.CaseTruth(), create_policy("sidecar", {"gpu_counts": "1,2,4"}),
                           Cluster.parse("1x4"), EngineConfig(mechanism=mech)).run(workload)
        s = summarize(result)
        print(f"  shrink {shrink_s:.0f} s: makespan {s.makespan_s:.1f} ({s.makespan_s / 1143 - 1:+.1%}), "
              f"avg JCT {s.avg_jct_s:.1f} ({s.avg_jct_s / 889 - 1:+.1%})")


if __name__ == "__main__":
    main()
