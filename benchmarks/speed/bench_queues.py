"""Teams' queues at datacenter scale (issue 36): what the tenancy layer costs and guarantees.

A Philly window (`--window week|day|8h`: the trace's busiest week, day or 8 hours, picked as
`bench_scale.busiest_day` picks its day) on `--cluster` (default 256x8, 2,048 GPUs) with
Philly's virtual clusters as queues under `--quotas proportional` (each VC's quota its share of
the window's GPU-time), under each policy of `--policies` (default fifo, tiresias-las, pollux),
each also with one queue (the policy alone on the whole cluster, the same jobs). Per policy,
measured in this one run:

* the longest a queue with waiting work stayed below its quota while another queue borrowed
  (`queue_metrics.longest_starved_s`, over all queues), against the bound it must meet: one
  round (the engine's interval) plus the preemption/resize time (the mechanism's start pause and
  its release delay after a shrink or preemption);
* the layer's part of that (`CarveWatch`): the longest a queue with waiting work was carved
  fewer GPUs than its quota guarantees (min(quota, what its jobs need to run)) while another
  queue was carved more than its quota; what the first figure adds on top is the inner policy
  leaving GPUs of its share idle;
* GPU utilisation with queues over one queue's (target: no more than 5 % lower);
* average JCT (finished jobs) with queues over one queue's (target: no more than 10 % higher);
* each queue's finish-time fairness (mean, max), with queues and with one queue;
* each run's wall and CPU time (`time.process_time` of the process that ran it: the machine may
  be shared).

`--pollux-window` runs pollux on another window (default: the same): a week at 2,048 GPUs under
pollux takes far longer than the others. Every line names the window it ran on and how long it
took. `--max-hours` stops each simulation after that much simulated time (unfinished jobs are
then counted and printed; averages cover finished jobs).

Then the **elastic reclaim** figure, simulated: on 4x8 (32 GPUs) with two queues of quota 16,
queue a's four 8-GPU imagenet jobs borrow queue b's idle quota; at t = 3,600 s two 8-GPU
imagenet jobs of b arrive. Printed side by side for an elastic inner policy (pollux: the borrowers shrink in place)
and a gang one (fifo: a borrower is preempted whole): the seconds from b's arrival until the
layer gives b its quota, until b's first job and until all its jobs hold GPUs, until b holds
its quota (or what its jobs asked, when less), and what a's jobs went through (shrunk in place,
preempted).

Options: `--window`, `--pollux-window`, `--cluster`, `--policies`, `--max-hours`, `--jobs N`
(runs in N worker processes; CPU times are each run's own), `--skip-reclaim`, `--out FILE`
(the printed output also written there).

Run (from the repository root, shared data beside the repository or at $CORRAL_SHARED_DATA)::

    python benchmarks/speed/bench_queues.py --window day --pollux-window 8h --jobs 3

What it printed is kept in benchmarks/results/bench_queues_<commit>.txt.

Last run (2026-11-28, at a18bd3d, on the 2-core shared AMD EPYC, load average 3-20 from other
work; CPU times are each run's own; benchmarks/results/bench_queues_a18bd3d.txt): the busiest
week (14,046 jobs, 11 queues with jobs) on 256x8 under fifo and tiresias-las; pollux on the
busiest day (3,987 jobs): a day of pollux with queues took 890 s wall (134 s CPU) here, so a
week (about 3.5 times the jobs) does not finish within 10 minutes:

* fifo (week): with queues 13.7 s CPU, one queue 3.9 s; longest below quota 59 s (bound 90 s:
  met); utilisation ratio 1.008 (met); average JCT ratio 1.002 (met).
* tiresias-las (week): 14.5 s against 6.4 s; 59 s (met); 0.990 (met); 0.995 (met).
* pollux (day): 133.7 s against 156.7 s; 805 s (not met: queue b436b2, 3,037 of the 3,987
  jobs, quota 520); utilisation ratio 0.870 (not met); JCT ratio 1.096 (met). On the busiest
  8 hours (bench_queues_6b337d0.txt): 859 s, 0.791, 1.173 (none met).
* pollux (day) at f938d13 (the layer spreads an elastic queue's GPUs over nodes while its jobs
  wait and lends idle GPUs past the demand; bench_queues_f938d13.txt, beside main at 01cb6c2
  run at the same time): 865 s (not met; was 805 s), utilisation ratio 0.885 (not met; was
  0.870), JCT ratio 0.939 (met; was 1.096); b436b2's FTF mean 7.03 -> 4.71 (one queue 4.55),
  6c71a0's 5.16 -> 3.06 (3.32). 134.5 s CPU, 624 s wall with queues. On the busiest 8 hours:
  859 -> 597 s, 0.79 -> 0.81, 1.173 -> 1.022. fifo and tiresias-las (week): as above.
* pollux (week, the first run of it) at fdd669d on the quiet machine (load 1.3-2;
  bench_queues_week_pollux_fdd669d.txt): 764 s wall with queues, 745 s with one queue; longest
  below quota 608 s (not met; one queue judged by the same quotas 1,200 s), the layer's part
  0 s (met: pollux leaves GPUs of its share idle), utilisation ratio 0.815 (not met), JCT
  ratio 1.013 (met). Its busiest day there took 117 s a run (bench_queues_day_pollux_*.txt):
  865 s, layer's part 0 s, 0.885, 0.939. The 624-890 s a day took above were the loaded machine.
* pollux, what holding its guarantee would cost (2026-11-28, at ecf2e81, quiet machine; each
  tried in a scratch worktree and not merged; busiest 8 hours, `--window 8h --policies pollux
  --skip-reclaim --jobs 2`; main: held below quota 597 s, utilisation 0.344 against 0.426,
  average JCT 959 s against 938 s). Pollux's own search leaves waiting jobs beside idle GPUs
  of its share: on b436b2's sub-cluster at 6.88 h (290 GPUs, 201 jobs) it placed 134 and
  held 157 GPUs, and 300 generations without early stopping placed 144; 30 of those it left
  out were running and were dropped for new ones (its growth requests go to jobs in priority
  order, so the capacity of a node goes to the least-served job). Holding the guarantee:
  - the layer starts the queue's waiting jobs on idle GPUs of its share (branch `backfill`),
    at their requested GPUs: held below quota 59 s (met), JCT ratio 1.24 (b436b2's average
    JCT 715 -> 975 s, its queueing 81 -> 66 s), utilisation 0.340; at one GPU each: 98 s,
    1.25, 0.341.
  - pollux itself places every job its search left out on the best-fitting node's free GPUs
    after the search: 59 s with queues and with one queue; JCT with one queue 938 -> 1,014 s
    (+8 %), with queues 1,161 s (ratio 1.146); utilisation 0.343 against 0.402. Only jobs
    that waited 60 s or more: 477 s, JCT ratio 1.154; on the emptiest node instead: 357 s,
    1.127.
  So on Philly's bursts pollux's idle GPUs are what keep its average JCT low: starting every
  waiting job at once (1 GPU each, where its search would grow fewer jobs to 4-8 GPUs) costs
  8-25 % of average JCT, more than the 10 % target allows. Utilisation: lending every idle GPU
  past the demand gave 0.342, not spreading a queue's GPUs 0.335 (and 919 s below quota), and
  capping a queue's demand at what it held plus what its waiting jobs ask once it left GPUs
  idle 0.333 (JCT ratio 1.15): the gap is not the carve's size. With one queue the busiest
  queue's 42 jobs held 1,513 GPUs at 6.75 h, with queues 1,037 of the 1,225 carved for it.
  What the gap is (bench_queues_8h_c2120a0.txt, at c2120a0, now printed by this
  benchmark): the same jobs ran to the end on 8,267 GPU-hours with queues against 10,207 with
  one queue (0.810, the utilisation ratio: the makespan is the same), and 6 of the 10 queues
  had a lower average JCT with queues (ee9e8c 11,198 s against 17,401 s, ed69ec 7,396 against
  8,899, 6214e9 2,241 against 3,165); the burst queue b436b2 (1,545 of the 1,978 jobs) waited
  longer, 715 s against 595 s, and three more were 0.7-4.2 % slower (2869ce, 7f04ca, 6c71a0). Pollux with queues spent fewer GPU-hours on the same work
  (smaller, more efficient allocations), which the utilisation figure counts against it.
* elastic reclaim: the layer carves b its quota in the round b arrives under both; fifo
  preempts two of a's gangs and b holds its 16 GPUs in that round; pollux shrinks a's four
  jobs in place, b's jobs hold GPUs one round later (pollux starts a job on its second round)
  and 9 of the 16 after 10 minutes (pollux's own choice within b's share).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import POLLUX, machine, require  # noqa: E402

from corral.core import Cluster  # noqa: E402
from corral.core.queues import parse_queues  # noqa: E402
from corral.policies import create_policy  # noqa: E402
from corral.policies.tenancy import QueuedPolicy  # noqa: E402
from corral.sim.analysis.allocations import record_allocations  # noqa: E402
from corral.sim.analysis.metrics import summarize  # noqa: E402
from corral.sim.analysis.queue_metrics import queue_summary, resolve_queues  # noqa: E402
from corral.sim.loop.config import EngineConfig  # noqa: E402
from corral.sim.loop.engine import Simulator  # noqa: E402
from corral.sim.truth.catalog import CatalogTruth  # noqa: E402
from corral.sim.workloads import Workload, load_philly  # noqa: E402
from corral.sim.workloads.common import make_job  # noqa: E402

WINDOWS = {"week": 168.0, "day": 24.0, "8h": 8.0}
UTIL_TARGET = 0.05  # queues' utilisation at most 5 % below one queue's
JCT_TARGET = 0.10  # queues' average JCT at most 10 % above one queue's


def philly_window(truth, window: str) -> Workload:
    """The busiest `window` of the Philly trace (the window with most jobs, as
    `bench_scale.busiest_day`)."""
    return load_philly(require(POLLUX / "philly.csv"), truth.limits(), start=None,
                       hours=WINDOWS[window])


def engine_config(max_hours: float | None) -> EngineConfig:
    return EngineConfig(max_time_s=None if max_hours is None else max_hours * 3600.0)


def one_run(task: tuple[str, str, str, bool, float | None, bool]) -> dict:
    """One simulation: `policy` on `window` on `cluster`, with the proportional queues or with
    one queue; its figures, per-queue ones included (for one queue: grouped by the same VCs).
    The last item: the queues' `start_waiting`."""
    policy_name, window, cluster_text, queued, max_hours, start_waiting = task
    truth = CatalogTruth()
    workload = philly_window(truth, window)
    cluster = Cluster.parse(cluster_text)
    tree = dataclasses.replace(resolve_queues("proportional", workload, cluster.total_gpus),
                               start_waiting=start_waiting)
    policy = (QueuedPolicy(lambda: create_policy(policy_name), tree) if queued
              else create_policy(policy_name))
    carved = watch_carves(policy, tree) if queued else None
    book = record_allocations(policy)
    cfg = engine_config(max_hours)
    wall, cpu = time.perf_counter(), time.process_time()
    result = Simulator(truth, policy, cluster, cfg).run(workload)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    result.allocations = book
    named = {spec.name: spec.queue for spec in workload.jobs}
    for record in result.jobs:
        record.queue = tree.leaf_for(named.get(record.name))
    s = summarize(result)
    overheads = cfg.mechanism.overheads
    return {
        "policy": policy_name, "window": window, "queued": queued, "jobs": len(workload.jobs),
        "wall_s": wall, "cpu_s": cpu, "rounds": result.rounds, "avg_jct_s": s.avg_jct_s,
        "gpu_util": s.gpu_util, "finished": s.finished, "unfinished": s.unfinished,
        "stopped": s.stopped, "queues": queue_summary(result, tree),
        "quotas": {q: tree.quota(q) for q in tree.leaves},
        "carved_short_s": carved.longest() if carved is not None else None,
        "bound_s": cfg.interval_s + max(overheads.start_s, overheads.shrink_s)
        + overheads.resize_release_s,
    }


class CarveWatch:
    """The layer's own promise, apart from what the inner policy does with it: per round, is a
    queue with a waiting job carved fewer GPUs than its quota guarantees it (`Shares.guaranteed`:
    min(quota, what its jobs need to run); an elastic job's growth beyond that is borrowed, not
    guaranteed: docs/queues.md) while another queue is carved more than its quota? `longest` is
    the longest such stretch over all queues (seconds between the rounds that start and end
    it)."""

    def __init__(self, tree) -> None:
        self.tree = tree
        self.since: dict[str, float] = {}
        self.worst = (0.0, "")

    def judge(self, now: float, waiting: set[str], carve: dict[str, int],
              guaranteed: dict[str, int]) -> None:
        quota = {q: self.tree.quota(q) for q in self.tree.leaves}
        over = {q for q in quota if carve.get(q, 0) > quota[q]}
        for q in quota:
            short = (q in waiting and carve.get(q, 0) < guaranteed.get(q, 0)
                     and bool(over - {q}))
            if short:
                self.since.setdefault(q, now)
            elif q in self.since:
                self.worst = max(self.worst, (now - self.since.pop(q), q))

    def longest(self) -> tuple[float, str]:
        return self.worst


def watch_carves(layer: QueuedPolicy, tree) -> CarveWatch:
    """Wrap `layer.decide` to judge each round's carve (`CarveWatch`)."""
    watch = CarveWatch(tree)
    decide = layer.decide

    def watched(snapshot):
        out = decide(snapshot)
        waiting = {tree.leaf_for(v.spec.queue) for v in snapshot.jobs if v.assignment is None}
        split = layer.last_shares
        watch.judge(snapshot.time_s, waiting, dict(layer.last_carve),
                    dict(split.guaranteed) if split is not None else {})
        return out
    layer.decide = watched  # type: ignore[method-assign]
    return watch


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b not in (None, 0) else None


def fmt(x: float | None, spec: str = ".0f") -> str:
    return "-" if x is None else format(x, spec)


def report_policy(out, q: dict, one: dict) -> None:
    p = q["policy"]
    out(f"\n== {p}: busiest {q['window']} of Philly ({q['jobs']} jobs), "
        f"{len(q['queues'])} queues with jobs (proportional quotas) vs one queue ==")
    for label, r in (("queues", q), ("one queue", one)):
        out(f"  {label:9s}: wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s, {r['rounds']} rounds, "
            f"{r['finished']} finished, {r['unfinished']} unfinished"
            + (f" ({r['stopped']})" if r["stopped"] else ""))
    starved = {name: f["longest_starved_s"] or 0.0 for name, f in q["queues"].items()}
    worst = max(starved, key=lambda k: starved[k]) if starved else None
    longest = starved[worst] if worst else 0.0
    one_starved = {name: f["longest_starved_s"] or 0.0 for name, f in one["queues"].items()}
    one_worst = max(one_starved.values(), default=0.0)
    bound = q["bound_s"]
    out(f"  longest a queue with waiting work stayed below its quota while another borrowed: "
        f"{longest:.0f} s (queue {worst}; one queue, judged by the same quotas: {one_worst:.0f} s);"
        f" bound one round + preemption/resize = {bound:.0f} s: "
        f"{'MET' if longest <= bound else 'NOT MET'}")
    if q.get("carved_short_s") is not None:
        short_s, short_q = q["carved_short_s"]
        out(f"  the layer's part: longest a queue with waiting work was carved less than its "
            f"quota guarantees while another was carved above its quota: {short_s:.0f} s"
            + (f" (queue {short_q})" if short_q else "") + f"; bound {bound:.0f} s: "
            f"{'MET' if short_s <= bound else 'NOT MET'} (the rest of the line above is the "
            "inner policy leaving GPUs of its share idle)")
    u = ratio(q["gpu_util"], one["gpu_util"])
    out(f"  GPU utilisation: queues {fmt(q['gpu_util'], '.3f')}, one queue "
        f"{fmt(one['gpu_util'], '.3f')}, ratio {fmt(u, '.3f')} (target >= {1 - UTIL_TARGET:.2f}): "
        f"{'-' if u is None else ('MET' if u >= 1 - UTIL_TARGET else 'NOT MET')}")
    hours = [sum(f["gpu_hours"] for f in r["queues"].values()) for r in (q, one)]
    out(f"  GPU-hours the same jobs took to the end: queues {hours[0]:,.0f}, one queue "
        f"{hours[1]:,.0f}, ratio {fmt(ratio(*hours), '.3f')} (an elastic policy that runs the "
        "same work on fewer GPU-hours shows a lower utilisation for it)")
    j = ratio(q["avg_jct_s"], one["avg_jct_s"])
    out(f"  average JCT: queues {fmt(q['avg_jct_s'])} s, one queue {fmt(one['avg_jct_s'])} s, "
        f"ratio {fmt(j, '.3f')} (target <= {1 + JCT_TARGET:.2f}): "
        f"{'-' if j is None else ('MET' if j <= 1 + JCT_TARGET else 'NOT MET')}"
        + ("" if q["finished"] == one["finished"] else
           f" (finished jobs differ: {q['finished']} vs {one['finished']})"))
    out(f"  {'queue':>10s} {'quota':>6s} {'jobs':>5s} {'FTF mean':>9s} {'FTF max':>9s} "
        f"{'1q mean':>9s} {'1q max':>9s} {'starved s':>9s} {'1q starved':>10s}")
    for name, f in sorted(q["queues"].items(), key=lambda kv: -kv[1]["quota_gpus"]):
        o = one["queues"].get(name, {})
        out(f"  {name:>10s} {f['quota_gpus']:6d} {f['jobs']:5d} {fmt(f['ftf_mean'], '9.2f')} "
            f"{fmt(f['ftf_max'], '9.2f')} {fmt(o.get('ftf_mean'), '9.2f')} "
            f"{fmt(o.get('ftf_max'), '9.2f')} {fmt(f['longest_starved_s'], '9.0f')} "
            f"{fmt(o.get('longest_starved_s'), '10.0f')}")
    out(f"  {'queue':>10s} {'avg JCT s':>10s} {'1q JCT s':>10s} {'GPU-h':>8s} {'1q GPU-h':>9s}")
    for name, f in sorted(q["queues"].items(), key=lambda kv: -kv[1]["quota_gpus"]):
        o = one["queues"].get(name, {})
        out(f"  {name:>10s} {fmt(f['avg_jct_s'], '10.0f')} {fmt(o.get('avg_jct_s'), '10.0f')} "
            f"{fmt(f['gpu_hours'], '8.0f')} {fmt(o.get('gpu_hours'), '9.0f')}")


# --- elastic reclaim ----------------------------------------------------------------------------

RECLAIM_QUEUES = "[queue.a]\nquota = 16\n[queue.b]\nquota = 16\n"
RECLAIM_AT_S = 3600.0


def reclaim_run(policy_name: str) -> dict:
    """Queue a borrows b's quota; b's work arrives at RECLAIM_AT_S (module docstring)."""
    truth = CatalogTruth()
    limits = truth.limits()
    cluster = Cluster.parse("4x8")
    tree = parse_queues(RECLAIM_QUEUES, total_gpus=cluster.total_gpus)

    def job(name: str, t: float, queue: str, app: str) -> object:
        lim = limits[app]
        return dataclasses.replace(make_job(name, t, app, lim, 8, lim.init_bsz), queue=queue)
    jobs = [job(f"a{i}", 10.0 * i, "a", "imagenet") for i in range(4)]
    jobs += [job(f"b{i}", RECLAIM_AT_S, "b", "imagenet") for i in range(2)]
    policy = QueuedPolicy(lambda: create_policy(policy_name), tree)
    book = record_allocations(policy)
    carved: list[tuple[float, int]] = []
    decide = policy.decide

    def watching(snapshot):
        decision = decide(snapshot)
        carved.append((snapshot.time_s, policy.last_carve.get("b", 0)))
        return decision
    policy.decide = watching  # type: ignore[method-assign]
    cfg = EngineConfig(max_time_s=RECLAIM_AT_S + 6 * 3600.0)
    Simulator(truth, policy, cluster, cfg).run(Workload("reclaim", jobs, "bench_queues"))
    quota = tree.quota("b")
    want = min(quota, sum(s.gpus for s in jobs if s.queue == "b"))

    def held_by(prefix: str, t: float) -> dict[str, int]:
        out = {}
        for name, hist in book.items():
            if name.startswith(prefix):
                g = 0
                for at, gpus in hist:
                    if at <= t:
                        g = gpus
                out[name] = g
        return out
    times = sorted({t for hist in book.values() for t, _ in hist if t >= RECLAIM_AT_S}
                   | {t for t, _ in carved if t >= RECLAIM_AT_S})

    def first(pred) -> float | None:
        for t in times:
            if pred(t):
                return t - RECLAIM_AT_S
        return None
    b_first = first(lambda t: any(g > 0 for g in held_by("b", t).values()))
    b_all = first(lambda t: all(g > 0 for g in held_by("b", t).values()))
    b_quota = first(lambda t: sum(held_by("b", t).values()) >= want)
    carve_quota = first(lambda t: any(at == t and g >= want for at, g in carved))
    shrunk = preempted = 0
    for name, hist in book.items():
        if name.startswith("a"):
            before = [g for t, g in hist if t < RECLAIM_AT_S]
            g0 = before[-1] if before else 0
            after = [g for t, g in hist if RECLAIM_AT_S <= t <= RECLAIM_AT_S + 600]
            if g0 > 0 and after:
                if 0 in after:
                    preempted += 1
                elif min(after) < g0:
                    shrunk += 1
    a_before = sum(held_by("a", RECLAIM_AT_S - 1).values())
    b_10min = sum(held_by("b", RECLAIM_AT_S + 600).values())
    return {"policy": policy_name, "carve": carve_quota, "first": b_first, "all": b_all,
            "quota": b_quota, "want": want, "shrunk": shrunk, "preempted": preempted,
            "a_before": a_before, "b_10min": b_10min, "start_s": cfg.mechanism.overheads.start_s,
            "interval_s": cfg.interval_s}


def report_reclaim(out, rows: list[dict]) -> None:
    out("\n== elastic reclaim (simulated): 4x8, queues a and b of quota 16; a's four 8-GPU "
        "imagenet jobs borrow b's idle quota; two 8-GPU imagenet jobs of b arrive at 3600 s ==")
    out(f"  seconds after b's arrival (decision times; a job then starts after the "
        f"{rows[0]['start_s']:.0f} s start pause; rounds every {rows[0]['interval_s']:.0f} s)")
    out(f"  {'':44s}" + "".join(f"{r['policy'] + (' (elastic)' if r['policy'] == 'pollux' else ' (gang)'):>20s}"
                                 for r in rows))
    lines = (("GPUs a held just before b arrived", "a_before", "d"),
             ("layer carves b its quota (sub-cluster)", "carve", ".0f"),
             ("b's first job holds GPUs", "first", ".0f"),
             ("all of b's jobs hold GPUs", "all", ".0f"),
             ("b holds its quota (16 GPUs)", "quota", ".0f"),
             ("GPUs b holds 10 min after it arrived", "b_10min", "d"),
             ("a's jobs shrunk in place (first 10 min)", "shrunk", "d"),
             ("a's jobs preempted (first 10 min)", "preempted", "d"))
    for label, key, spec in lines:
        out(f"  {label:44s}" + "".join(f"{fmt(r[key], spec) if r[key] is not None else 'never':>20s}"
                                       for r in rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", choices=sorted(WINDOWS), default="week")
    ap.add_argument("--pollux-window", choices=sorted(WINDOWS), default=None)
    ap.add_argument("--cluster", default="256x8")
    ap.add_argument("--quotas", choices=["proportional"], default="proportional")
    ap.add_argument("--policies", default="fifo,tiresias-las,pollux")
    ap.add_argument("--max-hours", type=float, default=None)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--skip-reclaim", action="store_true")
    ap.add_argument("--no-start-waiting", dest="start_waiting", action="store_false",
                    help="the queues' start_waiting = false (the default is true; the one-queue "
                    "runs are as before)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lines: list[str] = []

    def out(line: str) -> None:
        print(line, flush=True)
        lines.append(line)
        if args.out:  # written as it goes: a run stopped early keeps what it printed
            Path(args.out).write_text("\n".join(lines) + "\n")
    started = time.perf_counter()
    out(f"bench_queues: {machine()}; load average {os.getloadavg()[0]:.1f}")
    policies = [p for p in args.policies.split(",") if p]
    window_of = {p: (args.pollux_window or args.window) if p == "pollux" else args.window
                 for p in policies}
    out(f"cluster {args.cluster} ({Cluster.parse(args.cluster).total_gpus} GPUs), quotas "
        f"{args.quotas}; windows: " + ", ".join(f"{p} {w}" for p, w in window_of.items())
        + (f"; each run stopped after {args.max_hours} simulated hours" if args.max_hours else ""))
    out("queues with start_waiting = " + ("true: the layer starts waiting jobs on GPUs of a "
        "queue's guarantee its elastic policy left idle" if args.start_waiting else "false"))
    tasks = [(p, window_of[p], args.cluster, queued, args.max_hours, args.start_waiting)
             for p in policies for queued in (True, False)]
    by: dict[tuple[str, bool], dict] = {}

    def done(r: dict) -> None:  # a policy's figures as soon as both of its runs are in
        by[(r["policy"], r["queued"])] = r
        if (r["policy"], not r["queued"]) in by:
            report_policy(out, by[(r["policy"], True)], by[(r["policy"], False)])
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            for future in as_completed([pool.submit(one_run, t) for t in tasks]):
                done(future.result())
    else:
        for t in tasks:
            done(one_run(t))
    if not args.skip_reclaim:
        report_reclaim(out, [reclaim_run("pollux"), reclaim_run("fifo")])
    out(f"\ntotal wall {time.perf_counter() - started:.0f} s")
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
