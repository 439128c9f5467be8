"""Throughput fits as a large simulation makes them: the busiest Philly day's first hour under
pollux on 512x4, its fits captured and then timed again, uncached, one after another.

The fits (L-BFGS-B over Pollux's throughput model, `corral.perf.throughput`) were 45 % of that
simulation; each job refits when it runs a new configuration, warm-started from its last fit,
so nearly every fit has inputs of its own and the memo does not help. Printed: fits, CPU
seconds in all and per fit, objective evaluations per fit, and a digest of the fitted
parameters (the same digest before and after a change that keeps the fits' bits).

    python benchmarks/speed/bench_fits.py --save-inputs /tmp/fits.pkl      # capture, then time
    PYTHONPATH=<older checkout>/src python benchmarks/speed/bench_fits.py --inputs /tmp/fits.pkl

The second form times the same inputs with other code (any corral with `_fit_memo`).
Measured (2-core Intel Xeon @ 2.50GHz, 2026-11-27), one after the other on the same inputs:
1,177 fits, 109 evaluations a fit, 12.1 s CPU at 3fb7132 (the objective in numpy, 94 us an
evaluation) -> 7.4 s with the objective on Python floats (57 us), 1.64x, same digest 8985662c.
An hour earlier the host ran the same pair at 24.2 -> 14.9 s: its speed drifts, so compare
runs made together.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import machine
from bench_scale import busiest_day

from corral.core import Cluster
from corral.perf import throughput
from corral.policies import create_policy
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import Workload

FitInputs = tuple[tuple[bytes, ...], bool, "bytes | None"]


def capture(hours: float) -> list[FitInputs]:
    """The inputs of every fit computed while pollux runs the busiest day's first `hours`."""
    truth = CatalogTruth()
    day = busiest_day(truth)
    start = min(j.submit_time_s for j in day.jobs)
    jobs = [j for j in day.jobs if j.submit_time_s < start + hours * 3600]
    seen: list[FitInputs] = []
    fit = throughput._fit_memo.__wrapped__

    def recording(cols, prior_driven, initial):
        seen.append((cols, prior_driven, initial))
        return fit(cols, prior_driven, initial)
    throughput._fit_memo = functools.lru_cache(maxsize=throughput._FIT_MEMO_SIZE)(recording)
    try:
        Simulator(truth, create_policy("pollux"), Cluster.parse("512x4"),
                  EngineConfig(max_time_s=hours * 3600)).run(Workload(day.name, jobs, source=day.source))
    finally:
        throughput._fit_memo = functools.lru_cache(maxsize=throughput._FIT_MEMO_SIZE)(fit)
    return seen


def time_fits(inputs: list[FitInputs]) -> tuple[float, int, str]:
    """CPU seconds to compute every fit afresh, objective evaluations, digest of the results."""
    fit = throughput._fit_memo.__wrapped__
    evaluations = [0]
    loss_and_grad = throughput._loss_and_grad

    def counted(*args):
        evaluations[0] += 1
        return loss_and_grad(*args)
    digest = hashlib.sha256()
    throughput._loss_and_grad = counted
    try:
        started = time.process_time()
        results = [fit(*args) for args in inputs]
        cpu = time.process_time() - started
    finally:
        throughput._loss_and_grad = loss_and_grad
    for r in results:
        digest.update(r.as_array().tobytes())
    return cpu, evaluations[0], digest.hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=1.0, help="simulated hours to capture")
    ap.add_argument("--inputs", type=Path, help="time the fits captured in this file")
    ap.add_argument("--save-inputs", type=Path, help="keep the captured fits here")
    args = ap.parse_args()
    print(machine())
    if args.inputs:
        inputs = pickle.loads(args.inputs.read_bytes())
    else:
        inputs = capture(args.hours)
        if args.save_inputs:
            args.save_inputs.write_bytes(pickle.dumps(inputs))
    cpu, evaluations, digest = time_fits(inputs)
    n = max(len(inputs), 1)
    print(f"fits: {len(inputs)}, {cpu:.1f} s CPU ({1e3 * cpu / n:.1f} ms a fit), "
          f"{evaluations / n:.0f} objective evaluations a fit "
          f"({1e6 * cpu / max(evaluations, 1):.0f} us each, driver included); "
          f"results digest {digest}")


if __name__ == "__main__":
    main()
