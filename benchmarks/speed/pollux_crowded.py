"""Pollux on a crowded cluster (issue 45 item 1): the burst queue's round at 6.88 h.

On Philly's busiest 8 hours with proportional queues (`bench_queues.py --window 8h`, the
layer's `start_waiting` off, as then), pollux in the burst queue b436b2 at 6.88 h had 201 jobs
on a 290-GPU share and placed 134 of them on 157 GPUs. This script replays such a round: it
runs the same simulation until the first round at or after `--at-h` hours in which an inner
pollux sees at least `--min-jobs` jobs (the run stops there; the share's size is printed),
keeps that round's snapshot and a copy of the inner policy as it stood, then decides the round
again, warm (the policy as it was: what the run decided) and cold (a fresh policy), each three
ways: the search's own best (as before issue 45), with `fill_idle`, and with `fill_idle` then
`grow_idle` (the default), and prints per decision the jobs placed, GPUs held, GPUs idle,
waiting jobs that fit the idle GPUs, running jobs dropped, and the fitness (Eq. 14).
The simulation to that round takes about two minutes.

Run (from the repository root, shared data beside it)::

    python benchmarks/speed/pollux_crowded.py

Last run (2026-11-30, at 47aee06, beside another benchmark; benchmarks/results/
pollux_crowded_47aee06.txt): with growth in the run, the burst queue's round at 6.88 h is 192
jobs on a 553-GPU share (107 nodes). Warm: the search alone placed 138 jobs on 272 GPUs (281
idle, 54 waiting jobs fitting them, 25 running jobs dropped); with `fill_idle`, 191 on 367
(fitness 0.0034 -> 0.0320); with `grow_idle` too, 191 on 466, 87 idle, none dropped, fitness
0.0329. The job left out was submitted that instant (REALLOC_FACTOR 0: placing it leaves the
fitness as it is); the idle GPUs left are beyond the running jobs' caps. The run before it
(2026-11-29, 3c19715, fill only: pollux_crowded_3c19715.txt): 355 GPUs on 88 nodes, the
search alone 133 jobs on 179 GPUs, with fill 190 on 236.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_queues import philly_window  # noqa: E402

from corral.core import Cluster  # noqa: E402
from corral.core.jobs import Decision, Snapshot  # noqa: E402
from corral.policies import create_policy  # noqa: E402
from corral.policies.pollux import policy as policy_module  # noqa: E402
from corral.policies.pollux.policy import Pollux  # noqa: E402
from corral.policies.pollux.search import fitness  # noqa: E402
from corral.policies.tenancy import QueuedPolicy  # noqa: E402
from corral.sim.analysis.queue_metrics import resolve_queues  # noqa: E402
from corral.sim.loop.engine import Simulator  # noqa: E402
from corral.sim.truth.catalog import CatalogTruth  # noqa: E402


class _Caught(Exception):
    """Stops the simulation once the round is kept."""


def capture(at_h: float, min_jobs: int) -> tuple[Snapshot, Pollux]:
    """Run the busiest 8 hours with queues until the round (module docstring); keep it."""
    truth = CatalogTruth()
    workload = philly_window(truth, "8h")
    cluster = Cluster.parse("256x8")
    tree = dataclasses.replace(resolve_queues("proportional", workload, cluster.total_gpus),
                               start_waiting=False)

    caught: list[tuple[Snapshot, Pollux]] = []

    class Catching(Pollux):
        def decide(self, snapshot: Snapshot) -> Decision:
            if snapshot.time_s >= at_h * 3600 and len(snapshot.jobs) >= min_jobs:
                caught.append((snapshot, _plain(self)))
                raise _Caught
            return super().decide(snapshot)

    policy = QueuedPolicy(Catching, tree)
    try:
        Simulator(truth, policy, cluster).run(workload)
    except _Caught:
        pass
    else:
        raise SystemExit(f"no round at >= {at_h} h with {min_jobs} jobs in a queue")
    return caught[0]


def _plain(policy: Pollux) -> Pollux:
    """A plain `Pollux` with a copy of `policy`'s state."""
    out = Pollux(policy.params)
    out.__dict__.update(copy.deepcopy(policy.__dict__))
    return out


def describe(label: str, snapshot: Snapshot, policy: Pollux, decision: Decision,
             seconds: float) -> str:
    """One line: what `decision` does with the round (module docstring)."""
    total = snapshot.cluster.total_gpus
    placed = {n: a.placement for n, a in decision.assignments.items() if a.placement.slots}
    held = sum(p.num_gpus for p in placed.values())
    idle = total - held
    running = {v.name for v in snapshot.jobs if v.placement.slots}
    dropped = len(running - set(placed))
    free = [g - u for g, u in zip(snapshot.cluster.gpus_per_node,
                                  decision.used_gpus(snapshot.cluster.num_nodes))]
    most = max(free, default=0)  # a waiting job fits when one node has its fewest GPUs free
    fits = sum(1 for v in snapshot.jobs if v.name not in placed and max(v.spec.min_gpus, 1) <= most)
    jobs = sorted(snapshot.jobs, key=lambda v: (v.attained_gpu_s, v.spec.submit_time_s, v.name))
    problem = policy.problem(snapshot.time_s, snapshot.cluster, jobs)
    fit = _fitness(problem, jobs, placed)
    return (f"{label:>30s}: {len(placed):3d} of {len(snapshot.jobs)} jobs placed on {held} GPUs, "
            f"{idle} idle, {fits} waiting jobs fit the idle GPUs, {dropped} of {len(running)} "
            f"running dropped, fitness {fit:.5f}, {seconds:.2f} s, "
            f"{policy.last_generations} generations, {policy.last_filled} placed by fill_idle, "
            f"{policy.last_grown} grown by grow_idle")


def left_out(snapshot: Snapshot, policy: Pollux, decision: Decision) -> list[str]:
    """Why each waiting job that fits a node's free GPUs was left out: its fitness term with
    its fewest GPUs on one node (speedup times REALLOC_FACTOR) is no higher than left out."""
    free = [g - u for g, u in zip(snapshot.cluster.gpus_per_node,
                                  decision.used_gpus(snapshot.cluster.num_nodes))]
    jobs = sorted(snapshot.jobs, key=lambda v: (v.attained_gpu_s, v.spec.submit_time_s, v.name))
    problem = policy.problem(snapshot.time_s, snapshot.cluster, jobs)
    table = problem.speedup
    out = []
    for j, v in enumerate(jobs):
        want = max(v.spec.min_gpus, 1)
        if decision.get(v.name) is not None or want > max(free, default=0):
            continue
        at = table.offset[j] + table.width[j] + want
        speedup = float(table.flat[at]) if want < table.width[j] else float("nan")
        out.append(f"left out: {v.name}, age {snapshot.time_s - v.spec.submit_time_s:.0f} s, "
                   f"REALLOC_FACTOR {problem.penalty[j]:.3f}, cap {problem.max_gpus[j]} GPUs, "
                   f"speedup on {want} GPU(s) {speedup:.4f}")
    return out


def _fitness(problem, jobs, placed) -> float:
    """FITNESS_p of a decision (the objective the search maximises)."""
    import numpy as np

    index = {v.name: j for j, v in enumerate(jobs)}
    alloc = np.zeros_like(problem.base)
    for name, placement in placed.items():
        for node, g in placement.slots:
            alloc[index[name], node] = g
    k = alloc.sum(axis=1)
    n = (alloc > 0).sum(axis=1)
    speed = problem.speedup.lookup(n, k)
    changed = (alloc != problem.base).any(axis=1)
    return float(fitness(speed, changed, problem.penalty, problem.p))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--at-h", type=float, default=6.88)
    ap.add_argument("--min-jobs", type=int, default=150)
    ap.add_argument("--generations", type=int, default=300, help="for the long cold search")
    args = ap.parse_args()
    t = time.perf_counter()
    snapshot, policy = capture(args.at_h, args.min_jobs)
    print(f"simulated to the round in {time.perf_counter() - t:.0f} s")
    print(f"round at {snapshot.time_s / 3600:.2f} h: {len(snapshot.jobs)} jobs, "
          f"{snapshot.cluster.total_gpus} GPUs on {snapshot.cluster.num_nodes} nodes")
    runs = [("warm (as the run)", lambda: copy.deepcopy(policy)),
            ("cold", lambda: create_policy("pollux")),
            (f"cold, {args.generations} gens",
             lambda: Pollux(dataclasses.replace(policy.params, generations=args.generations,
                                                patience=0)))]
    for label, make in runs:
        for fill, grow, steps in ((False, False, "search alone"), (True, False, "fill"),
                                  (True, True, "fill, grow")):
            p = make()
            assert isinstance(p, Pollux)
            t = time.perf_counter()
            with _steps(fill, grow):
                decision = p.decide(snapshot)
            print(describe(f"{label}, {steps}", snapshot, p, decision, time.perf_counter() - t))
            if fill:
                for line in left_out(snapshot, p, decision):
                    print(f"{'':>32s}{line}")


@contextlib.contextmanager
def _steps(fill: bool, grow: bool):
    """`fill_idle` and `grow_idle` as they are (on) or switched off (off: the search's best)."""
    kept = policy_module.fill_idle, policy_module.grow_idle
    if not fill:
        policy_module.fill_idle = lambda *args, **kw: []
    if not grow:
        policy_module.grow_idle = lambda *args, **kw: {}
    try:
        yield
    finally:
        policy_module.fill_idle, policy_module.grow_idle = kept


if __name__ == "__main__":
    main()
