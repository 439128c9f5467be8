"""Does pollux's objective decline the move bench_tenants.py's raise offers it? Its fitness
for queue nlp in the round after the quota raise, staying and moving (issue 43).

After `bench_tenants.py --only pollux --keep DIR`: nlp's two jobs (nlp-1, asking 2, and nlp-2,
asking 1) run on 1 GPU each of one type; the layer offers nlp the GPU of the other type
vision gave back (`shape.movable`). This rebuilds nlp's sub-cluster as offered (2 GPUs of the
jobs' type, 1 of the other) and pollux's problem for it (`Pollux.problem`: the jobs'
estimators from their last report, placements, restarts and relaunches as at the raise) and
prints the fitness (`search.fitness`: power mean of speedups, a changed job's times its restart
factor max(T - R*delta, 0) / (T + delta), T its age, R its relaunches: its restarts less its
in-place resizes, `JobView.relaunches`, delta 30 s) of staying and of each
move (one job to the other type's GPU, the other grown to 2 on its own type where it may), in
that round and later, and when the move would first win. Run: python benchmarks/live/pollux_move_fitness.py
DIR
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import STATUS_RUNNING, Assignment, JobView
from corral.policies.pollux.policy import Pollux, _speedup
from corral.policies.pollux.search import fitness
from corral.service.jobs import LiveJob
from corral.service.store import Store

HERE, THERE, GROWN = Placement.of({0: 1}), Placement.of({1: 1}), Placement.of({0: 2})


def nlp_at_raise(store: Store, put: float) -> tuple[list[JobView], str]:
    """nlp-1 and nlp-2 as pollux saw them at the raise (each on 1 GPU of node 0), in pollux's
    order, and the GPU type they ran on."""
    views, types = [], set()
    for doc in store.jobs():
        if doc["submission"].get("name") not in ("nlp-1", "nlp-2"):
            continue
        events = [e for e in store.events(doc["id"]) if e["time_s"] <= put]
        changes = [e for e in events  # the loop's placements, not the executor's
                   if e["kind"] in ("started", "resized")  # "launch N: resized"
                   and " GPU(s) localhost-" in e["detail"]]
        in_place = sum(1 for e in events if e["kind"] == "resize-pause"
                       and e["detail"].startswith("in-place"))
        types.add(changes[-1]["detail"].split("localhost-")[1].split(":")[0])
        view = LiveJob.from_doc(doc).view()
        views.append(dataclasses.replace(view, status=STATUS_RUNNING, assignment=Assignment(HERE),
                                         restarts=len(changes) - 1,
                                         relaunches=len(changes) - 1 - in_place))
    if len(views) != 2 or len(types) != 1:
        raise SystemExit("bench_tenants.py's nlp-1 and nlp-2 on one GPU type each not found")
    views.sort(key=lambda v: (v.attained_gpu_s, v.spec.submit_time_s, v.name))
    return views, types.pop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("keep", type=Path, help="bench_tenants.py's --keep directory")
    args = ap.parse_args()
    store = Store(args.keep / "pollux" / "data" / "state.db")
    put = next(e["time_s"] for e in store.events() if e["kind"] == "queues-changed"
               and e["time_s"] > 1.0)
    views, on = nlp_at_raise(store, put)
    other = "t4" if on == "a100" else "a100"
    cluster = Cluster.parse(f"{on}:1x2,{other}:1x1")  # node 0: the jobs' type; node 1: offered
    names = [f"{LiveJob.from_doc(store.job(v.name) or {}).submission.name} ({v.name})"
             for v in views]
    policy = Pollux()
    print(f"raise at {put:.1f} s; nlp's sub-cluster {cluster.describe()}; jobs {names} "
          f"(restarts {[v.restarts for v in views]}, relaunches {[v.relaunches for v in views]})")
    wins = None
    for dt in np.arange(3.0, 600.0, 1.0):
        problem = policy.problem(put + dt, cluster, views)

        def fit(places: list[Placement], weigh: bool = True) -> tuple[list[float], float]:
            sp = np.array([_speedup(problem, j, p) or 0.0 for j, p in enumerate(places)])
            changed = np.array([p != v.placement and weigh for v, p in zip(views, places)],
                               dtype=float)
            return np.round(sp, 3).tolist(), float(fitness(sp, changed, problem.penalty,
                                                           problem.p))
        stay = fit([HERE, HERE])
        moves = [[THERE if j == m else GROWN if problem.max_gpus[j] >= 2 else HERE
                  for j in range(2)] for m in range(2)]
        best = max(fit(m)[1] for m in moves)
        if dt in (3.0, 30.0, 60.0, 120.0, 300.0):
            print(f"+{dt:.0f} s after the raise: restart factors "
                  f"{np.round(problem.penalty, 3).tolist()}; stay: speedups {stay[0]}, "
                  f"fitness {stay[1]:.3f}")
            for name, m in zip(names, moves):
                sp, f = fit(m)
                print(f"    move {name} to the {other} (the other on {m[1 - names.index(name)]}"
                      f"): speedups {sp}, "
                      f"fitness {f:.3f} (without restart factors {fit(m, weigh=False)[1]:.3f})")
        if wins is None and best > stay[1]:
            wins = dt
    print(f"the move first scores above staying {wins:.0f} s after the raise" if wins
          else "the move never scores above staying within 600 s")


if __name__ == "__main__":
    main()
