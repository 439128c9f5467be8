"""corral's own policy (issue 42) against pollux and sia, side by side in one run.

Every figure is measured in the run that prints it (none typed in):

* (a) one type: the eight shared Pollux workloads (load 1.0) on `16x4`, built-in truth. Rows:
  pollux, sia, corral with declared lengths exact, wrong (each job's declared epochs its
  truth's times a factor drawn log-uniformly from [1/2, 2], seeded per job), and absent, and
  the ablations: corral with one ingredient switched off (a Params flag each). Targets: avg JCT
  <= 0.85x pollux's, p99 JCT and worst finish-time fairness no worse; wrong lengths <= 0.95x
  pollux; no lengths no worse than pollux.
* (b) mixed: the same workloads on `k80:6x4,p100:3x8,v100:2x8`, requests capped at 24 (as
  bench_hetero.py). Targets: avg JCT <= 0.90x sia's, p99 and worst FTF no worse; wrong lengths
  <= 0.97x sia; none no worse than sia. Its ablation: corral without its finish-time-fairness
  guard (on the mixed cluster only: off on one type).
* (c) a round at 2,000 jobs on 2,048 GPUs of three types (bench_hetero.py (d)'s workload):
  corral's median CPU per round against sia's, pooled over `--c-repeats` runs of each that
  alternate which goes first (one pair alone has put either ahead on this machine).

Each row's gap to the LP bound (`workload_lp_bound`, computed once per workload; per row the
mean of the ratios) is printed beside every other row's, and by default every registered policy
(`corral.policies.POLICIES`: all of them run on either shape, a type-unaware one on one type per
job) is a row of (a) and (b); those that read the truth (`Promises.oracle`: heSRPT, SRTF, ...)
are marked "(oracle)": they know what corral may not. The declared lengths are changed in what
the policy sees only (`Declared`, a wrapper that rewrites each view's `JobSpec.epochs`): the
simulated jobs train their truth's epochs whatever is declared. Figures are means over the workloads run;
p99 and worst FTF are the means of each workload's.

    python benchmarks/speed/bench_policy.py [--workloads 1,2] [--only a,b,c] [--jobs 2]
        [--no-ablations] [--exact-only]
        [--others all|none|tiresias-las,optimus]

`--others`: which further policies are rows (default all registered; none: corral, pollux and
sia only). Cells run on `--jobs` worker processes.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import SHARED, machine  # noqa: E402

from corral.core import Cluster  # noqa: E402
from corral.core.jobs import Decision, JobView, Snapshot  # noqa: E402
from corral.core.policy import Policy  # noqa: E402
from corral.policies import POLICIES, create_policy  # noqa: E402
from corral.sim.analysis.bound_jobs import workload_lp_bound  # noqa: E402
from corral.sim.analysis.metrics import summarize  # noqa: E402
from corral.sim.loop.config import EngineConfig  # noqa: E402
from corral.sim.loop.engine import Simulator  # noqa: E402
from corral.sim.truth.source import TruthSource  # noqa: E402
from corral.sim.workloads import Workload, load_workloads  # noqa: E402

DATA = Path(os.environ.get("CORRAL_SHARED_DATA", SHARED))
ONE = "16x4"
MIXED = "k80:6x4,p100:3x8,v100:2x8"
SEED = 0

#: (label, policy, overrides, declared lengths: exact | wrong | none)
CORRAL_ROWS = [
    ("corral", "corral", {}, "exact"),
    ("corral wrong x[1/2,2]", "corral", {}, "wrong"),
    ("corral no lengths", "corral", {}, "none"),
]
ABLATIONS = [
    ("- remaining_work", "corral", {"remaining_work": "false"}, "exact"),
    ("- rank_power", "corral", {"rank_power": "0"}, "exact"),
    ("- restart_costs", "corral", {"restart_costs": "false"}, "exact"),
    ("- calibrate", "corral", {"calibrate": "false"}, "exact"),
    ("- learn_lengths (wrong)", "corral", {"learn_lengths": "false"}, "wrong"),
    ("- learn_lengths (none)", "corral", {"learn_lengths": "false"}, "none"),
]
#: (b)'s: the ingredients that act on the mixed cluster only
MIXED_ABLATIONS = [
    ("- ftf guard", "corral", {"ftf_threshold": "0"}, "exact"),
]


def wrong_factor(name: str, seed: int = SEED) -> float:
    """The factor job `name`'s declared epochs are off by: log-uniform on [1/2, 2], seeded."""
    return math.exp(random.Random(f"{seed}:{name}").uniform(math.log(0.5), math.log(2.0)))


class Declared(Policy):
    """Runs `inner` on views whose declared epochs are exact, wrong or absent (`mode`)."""

    name = "declared"

    def __init__(self, inner: Policy, mode: str) -> None:
        super().__init__(inner.params)
        self.inner, self.mode = inner, mode
        self.promises = inner.promises

    def _view(self, view: JobView) -> JobView:
        spec = view.spec
        if self.mode == "none":
            epochs = None
        elif spec.epochs is None:
            epochs = None
        else:
            epochs = max(1, round(spec.epochs * wrong_factor(spec.name)))
        return dataclasses.replace(view, spec=dataclasses.replace(spec, epochs=epochs))

    def decide(self, snapshot: Snapshot) -> Decision:
        if self.mode != "exact":
            snapshot = dataclasses.replace(
                snapshot, jobs=tuple(self._view(v) for v in snapshot.jobs),
                completed=tuple(self._view(v) for v in snapshot.completed))
        return self.inner.decide(snapshot)

    def stands_until(self) -> float:
        return self.inner.stands_until()

    def job_left(self, name: str) -> None:
        self.inner.job_left(name)


def capped(w: Workload, most: int) -> Workload:
    return Workload(w.name, [dataclasses.replace(j, gpus=min(j.gpus, most)) for j in w.jobs],
                    source=f"{w.source}, GPUs per job capped at {most}")


def workloads_for(cluster: str, which: list[int]) -> list[Workload]:
    truth = TruthSource.of(None, None).load()
    paths = [DATA / "pollux" / "workloads" / f"workload-{i}.csv" for i in which]
    missing = [p for p in paths if not p.exists()]
    if missing:
        sys.exit(f"skipped: {missing[0]} not found (corral data fetch pollux-workloads)")
    ws = load_workloads([str(p) for p in paths], truth.limits())
    c = Cluster.parse(cluster)
    if c.is_mixed:
        ws = [capped(w, max(c.gpus_of_type(t) for t in c.gpu_types)) for w in ws]
    return ws


def cell(cluster: str, index: int, label: str, policy: str, overrides: dict, mode: str) -> tuple:
    """One simulation: (label, workload index, avg, p99 JCT s, worst FTF, restarts/job, wall)."""
    truth = TruthSource.of(None, None).load()
    w = workloads_for(cluster, [index])[0]
    pol: Policy = create_policy(policy, overrides)
    if mode != "exact":
        pol = Declared(pol, mode)
    started = time.perf_counter()
    s = summarize(Simulator(truth, pol, Cluster.parse(cluster), EngineConfig()).run(w))
    return (label, index, s.avg_jct_s, s.p99_jct_s, s.ftf_max, s.restarts_per_job,
            s.unfinished, time.perf_counter() - started)


def bound(cluster: str, index: int) -> tuple:
    truth = TruthSource.of(None, None).load()
    w = workloads_for(cluster, [index])[0]
    return ("LP bound", index, workload_lp_bound(w, truth, Cluster.parse(cluster)).avg_jct_s)


def section(title: str, cluster: str, rows: list, which: list[int], pool: ProcessPoolExecutor
            ) -> dict[str, dict[str, float]]:
    """Run every row on every workload (and the LP bounds); print the table; return the means."""
    print(f"\n{title}", flush=True)
    bounds = {i: pool.submit(bound, cluster, i) for i in which}
    # workload by workload: a run stopped early leaves whole workloads, every row on each
    futures = [pool.submit(cell, cluster, i, *row) for i in which for row in rows]
    results: dict[str, list[tuple]] = {}
    for f in futures:
        r = f.result()
        results.setdefault(r[0], []).append(r)
        print(f"  . {r[0]} workload-{r[1]}: avg {r[2] / 3600:.3f} h, p99 {r[3] / 3600:.2f} h, "
              f"worst FTF {r[4]:.2f}, restarts/job {r[5]:.2f}, {r[7]:.0f} s", flush=True)
    lp = {i: f.result()[2] for i, f in bounds.items()}
    print(f"  {'policy':<26} {'avg JCT h':>9} {'p99 h':>7} {'worst FTF':>9} {'restarts':>8} "
          f"{'gap to LP':>9}")
    out = {}
    for label, rs in results.items():
        m = {"avg": statistics.mean(r[2] for r in rs), "p99": statistics.mean(r[3] for r in rs),
             "ftf": statistics.mean(r[4] for r in rs),
             "restarts": statistics.mean(r[5] for r in rs),
             "gap": statistics.mean(r[2] / lp[r[1]] for r in rs if lp.get(r[1]))}
        out[label] = m
        print(f"  {label:<26} {m['avg'] / 3600:>9.3f} {m['p99'] / 3600:>7.2f} {m['ftf']:>9.2f} "
              f"{m['restarts']:>8.2f} {m['gap']:>8.2f}x", flush=True)
    print(f"  LP bound (mean) {statistics.mean(lp.values()) / 3600:.3f} h", flush=True)
    return out


def round_times(policy: str) -> list[tuple[float, int, float]]:
    from bench_hetero import round_times as timed_rounds
    return timed_rounds(policy)


def other_rows(which: str, taken: set[str]) -> list[tuple[str, str, dict, str]]:
    """The rows `--others` names (all: every registered policy; none: no more), each labelled
    with its name, "(oracle)" after it where it reads the truth, without those in `taken`."""
    names = (POLICIES.names() if which == "all" else [] if which == "none"
             else [p for p in which.split(",") if p])
    unknown = [p for p in names if p not in POLICIES.names()]
    if unknown:
        sys.exit(f"--others: unknown policy {unknown[0]!r} (known: {', '.join(POLICIES.names())})")
    return [(p + (" (oracle)" if POLICIES.policy_class(p).promises.oracle else ""), p, {}, "exact")
            for p in names if p not in taken]


def check_targets(check: Callable[[str, bool, str], None], tag: str,
                  figures: dict[str, dict[str, float]], ref_name: str, avg: float,
                  wrong: float) -> None:
    """Issue 42's targets for one section, against `ref_name` (pollux on one type, sia on the
    mixed cluster): corral's average JCT at most `avg` times the reference's, its p99 and worst
    FTF no worse, with wrong lengths at most `wrong` times, with none no worse."""
    ref, own = figures[ref_name], figures["corral"]
    r = own["avg"] / ref["avg"]
    check(f"{tag} corral avg JCT <= {avg:.2f}x {ref_name}", r <= avg, f"{r:.3f}x")
    check(f"{tag} corral p99 JCT <= {ref_name}", own["p99"] <= ref["p99"],
          f"{own['p99'] / 3600:.2f} h against {ref['p99'] / 3600:.2f} h")
    check(f"{tag} corral worst FTF <= {ref_name}", own["ftf"] <= ref["ftf"],
          f"{own['ftf']:.2f} against {ref['ftf']:.2f}")
    if "corral wrong x[1/2,2]" in figures:  # (not with --exact-only)
        r = figures["corral wrong x[1/2,2]"]["avg"] / ref["avg"]
        check(f"{tag} wrong lengths: avg JCT <= {wrong:.2f}x {ref_name}", r <= wrong, f"{r:.3f}x")
    if "corral no lengths" in figures:
        r = figures["corral no lengths"]["avg"] / ref["avg"]
        check(f"{tag} no lengths: avg JCT <= {ref_name}", r <= 1.0, f"{r:.3f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="1,2,3,4,5,6,7,8", help="Pollux workload numbers")
    ap.add_argument("--only", default="a,b,c", help="sections (a,b,c)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--others", default="all",
                    help="more policies as rows: all (registered), none, or comma-separated")
    ap.add_argument("--no-ablations", action="store_true", help="skip the ablation rows")
    ap.add_argument("--c-repeats", type=int, default=3,
                    help="(c): runs of each policy's rounds, alternating which goes first")
    ap.add_argument("--exact-only", action="store_true",
                    help="corral with exact declared lengths only (no wrong / none rows)")
    args = ap.parse_args()
    which = [int(x) for x in args.workloads.split(",")]
    only = set(args.only.split(","))
    others = other_rows(args.others, {"corral", "pollux", "sia"})
    corral_rows = CORRAL_ROWS[:1] if args.exact_only else CORRAL_ROWS
    started = time.perf_counter()
    print(f"bench_policy on {machine()}; workloads {which}", flush=True)
    met: list[tuple[str, bool, str]] = []

    def check(name: str, ok: bool, fig: str) -> None:
        met.append((name, ok, fig))

    with ProcessPoolExecutor(args.jobs) as pool:
        if "a" in only:
            rows = [("pollux", "pollux", {}, "exact"), ("sia", "sia", {}, "exact"),
                    *corral_rows, *([] if args.no_ablations else ABLATIONS), *others]
            a = section(f"(a) one type, {ONE}, Pollux workloads {which}", ONE, rows, which, pool)
            check_targets(check, "(a)", a, "pollux", avg=0.85, wrong=0.95)
        if "b" in only:
            rows = [("sia", "sia", {}, "exact"), ("pollux", "pollux", {}, "exact"), *corral_rows,
                    *([] if args.no_ablations else MIXED_ABLATIONS), *others]
            b = section(f"(b) mixed, {MIXED}, requests capped at 24, Pollux workloads {which}",
                        MIXED, rows, which, pool)
            check_targets(check, "(b)", b, "sia", avg=0.90, wrong=0.97)
        if "c" in only:
            print("\n(c) rounds at 2,000 jobs on 2,048 GPUs (bench_hetero.py (d)'s workload), "
                  f"median CPU of the rounds with >= 1,000 jobs after the first; {args.c_repeats} "
                  "runs each, alternating which goes first (CPU time here drifts from run to "
                  "run: one pair alone has put either ahead)", flush=True)
            later: dict[str, list[float]] = {"sia": [], "corral": []}
            for repeat in range(args.c_repeats):
                order = ("sia", "corral") if repeat % 2 == 0 else ("corral", "sia")
                for policy in order:
                    rounds = pool.submit(round_times, policy).result()
                    these = [r[2] for r in rounds[1:] if r[1] >= 1000]
                    later[policy] += these
                    print(f"  run {repeat + 1} {policy:<8} first round {rounds[0][2]:.2f} s CPU; "
                          f"{len(these)} later rounds: median "
                          f"{statistics.median(these) if these else float('nan'):.3f} s CPU",
                          flush=True)
            med = {p: statistics.median(v) if v else float("nan") for p, v in later.items()}
            print(f"  all runs: sia median {med['sia']:.3f} s CPU over {len(later['sia'])} rounds,"
                  f" corral {med['corral']:.3f} s over {len(later['corral'])}", flush=True)
            check("(c) corral round no slower than sia's", med["corral"] <= med["sia"],
                  f"{med['corral']:.3f} s against {med['sia']:.3f} s")

    print("\ntargets:")
    for name, ok, fig in met:
        print(f"  {'MET   ' if ok else 'MISSED'} {name}: {fig}")
    print(f"\ntotal {time.perf_counter() - started:.0f} s wall", flush=True)


if __name__ == "__main__":
    main()
