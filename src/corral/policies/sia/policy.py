"""`sia`: Sia's heterogeneity-aware, goodput-optimised scheduling (Sia (SOSP'23) §3, as published
and as its public artifact's MIP policy runs it), every round (Sia's 60 s: the engine's interval).

Each job's best goodput per type and configuration (§3.2, `Sia.program`), capped by `job_cap`
and scaled off its current configuration by `restart_factor` (§3.4); the integer program
(§3.3, `program.py`) picks at most one configuration per job; `_pack` places them (§3.5).
Decided here, where the paper says nothing: a job with no model at all gets the 1-GPU
configurations with goodput 1 on every type; a job that never reports (`pollux.is_silent`) is
offered its requested GPU count only, with linear goodput; HiGHS picks between equal optima.
As the artifact does by default (`preserve_ckpt_allocs`), a job still in the restart its last
move started keeps its configuration (`keep_restarting`): the policy knows it by the job's
steps, unchanged since the decision that moved it, as a real scheduler knows a job that has not
reported a step since its restart.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import Assignment, Decision, JobView, Snapshot
from corral.core.policy import Policy, Promises, Reads, register_policy
from corral.core.reasons import shrink_reasons, waiting_reasons
from corral.perf.goodput import GoodputFunction, best_goodputs
from corral.policies.gpu_types import model_type
from corral.policies.placement import consolidated, fits, take
from corral.policies.pollux.policy import is_silent, realloc_factor
from corral.policies.sia.program import Config, Program, configurations, solve

__all__ = ["SiaParams", "Sia", "job_cap", "restart_factor"]

DISCOUNTS = ("age", "round")


@dataclass
class SiaParams:
    p: float = -0.5  # fairness power over normalised goodputs (Sia's default)
    lambda_n: float = 1.1  # penalty per job left without GPUs
    lambda_a: float = 0.01  # penalty per job whose configuration changes
    restart_penalty_s: float = 30.0  # δ, the restart pause the discount assumes
    restart_discount: str = "age"  # age (Pollux's factor, Sia's artifact) | round
    round_s: float = 60.0  # Sia's round, for restart_discount=round
    #: run time without a step after which a job is silent: longer than any restart pause its
    #: data may charge (imagenet 250 s in Sia's artifact), which holds GPUs without a step
    silent_after_s: float = 600.0
    #: a job that has made no step since this policy moved it keeps its configuration (Sia's
    #: artifact, simulator_config.preserve_ckpt_allocs): a restart longer than a round is not
    #: restarted again before it ends
    keep_restarting: bool = True

    def __post_init__(self) -> None:
        if not math.isfinite(self.p) or self.p == 0:
            raise ValueError(f"p must be finite and non-zero, got {self.p}")
        if self.lambda_n < 0 or self.lambda_a < 0:
            raise ValueError("lambda_n and lambda_a must be >= 0")
        if self.restart_penalty_s < 0 or not self.round_s > 0:
            raise ValueError("need restart_penalty_s >= 0 and round_s > 0")
        if self.restart_discount not in DISCOUNTS:
            raise ValueError(f"restart_discount must be one of {', '.join(DISCOUNTS)}, "
                             f"got {self.restart_discount!r}")


def job_cap(view: JobView, total_gpus: int) -> int:
    """The most GPUs Sia offers a job: twice the most GPUs it was seen on (any type), at least what
    it holds and its `min_gpus`, within `max_gpus` and its batch limit (Pollux's exploration cap,
    which Sia keeps)."""
    spec, est = view.spec, view.estimator
    seen = max((est.max_gpus(t) for t in est.gpu_types()), default=0) if est is not None else 0
    explore = max(2 * seen, view.num_gpus, spec.min_gpus, 1)
    batch = spec.max_bsz if spec.adaptive else spec.batch_size
    return max(1, min(explore, spec.max_gpus, max(batch // spec.min_local_bsz, 1), total_gpus))


def restart_factor(view: JobView, now_s: float, params: SiaParams) -> float:
    """The factor a configuration other than the job's current one is scaled by (§3.4): by default
    Pollux's re-allocation factor as Sia's artifact computes it, max(T - R δ, 0) / (T + δ) with T
    the job's age, R its relaunches (an in-place resize keeps its workers and costs well under a
    second, so it is not one; under checkpoint-restart every restart is), δ = `restart_penalty_s`
    (1 while the job is younger than δ);
    `restart_discount=round` uses (round - δ) / round, the restart pause over one round."""
    delay = params.restart_penalty_s
    if params.restart_discount == "round":
        return max(0.0, 1.0 - delay / params.round_s)
    age = now_s - view.spec.submit_time_s
    if age < delay:
        return 1.0
    return realloc_factor(age, view.relaunches, delay)


@register_policy
class Sia(Policy):
    name = "sia"
    summary = ("Sia: per-type goodput per configuration, an ILP choosing one (type, GPUs) per "
               "job with fairness p=-0.5, then packing on that type")
    Params = SiaParams
    #: Full views (per-type models, restarts, age); whole jobs on one type, chosen here.
    promises = Promises(reads=Reads.VIEWS | Reads.GPU_TYPES)

    def __init__(self, params: SiaParams | None = None) -> None:
        super().__init__(params)
        #: (cluster, its configurations, their indices by GPU count, those counts ascending)
        self._configs: tuple[Cluster, list[Config], list[int], list[int]] | None = None
        #: The last program's optimal objective (minimised form), for tests and benchmarks.
        self.last_objective = 0.0
        #: per job this policy moved: the placement it gave and the job's steps then
        self._moved: dict[str, tuple[Placement, int]] = {}

    def configurations(self, cluster: Cluster) -> list[Config]:
        return self._indexed(cluster)[1]

    def _indexed(self, cluster: Cluster) -> tuple[Cluster, list[Config], list[int], list[int]]:
        """The cluster's configurations with their indices ordered by GPU count, made once per
        cluster: a job's candidates are then a slice (`_goodputs`), not a scan of all of them."""
        if self._configs is None or self._configs[0] != cluster:
            configs = configurations(cluster)
            order = sorted(range(len(configs)), key=lambda i: configs[i].gpus)
            self._configs = (cluster, configs, order, [configs[i].gpus for i in order])
        return self._configs

    def program(self, snapshot: Snapshot) -> Program:
        """This round's program: for each job, type and configuration (`program.configurations`),
        the job's best goodput there (Pollux's batch optimum under the type's throughput model,
        `JobEstimator.goodput_fn`; a type it has not run on from its one-GPU profile,
        `JobEstimator.bootstrap`), up to `job_cap`, only on the job's `gpu_type` when it names
        one; restart-scaled (`restart_factor`). Every job's goodputs come from one vectorised
        `best_goodputs` call: per-job calls cost 2-3x more at 2,000 jobs."""
        cluster, prm = snapshot.cluster, self.params
        _, configs, order, counts = self._indexed(cluster)
        jobs = snapshot.jobs
        goodput = np.zeros((len(jobs), len(configs)))
        asks = _Asks()
        for j, view in enumerate(jobs):
            self._goodputs(view, configs, order, counts, cluster.total_gpus, goodput[j],
                           asks.row(j))
        asks.fill(goodput, configs)
        current: list[int | None] = []
        index = {(c.gpu_type, c.gpus): i for i, c in enumerate(configs)}
        for j, view in enumerate(jobs):
            cur = None
            if view.placement.slots:
                cur = index.get((cluster.placement_type(view.placement) or "", view.num_gpus))
                if cur is not None and not goodput[j, cur] > 0:
                    cur = None
            current.append(cur)
        restart = np.array([restart_factor(v, snapshot.time_s, prm) for v in jobs])
        capacity = {t: cluster.gpus_of_type(t) for t in cluster.gpu_types}
        keep = self._restarting(jobs, current, configs, capacity) if prm.keep_restarting else []
        return Program(goodput, configs, capacity, current, restart, prm.p, prm.lambda_n,
                       prm.lambda_a, keep)

    def _restarting(self, jobs: tuple[JobView, ...], current: list[int | None],
                    configs: list[Config], capacity: dict[str, int]) -> list[bool]:
        """Per job: it is still in the restart this policy's last move of it started (at the
        placement it was given, no step since), and its configuration still fits the cluster
        with the others kept before it."""
        left = dict(capacity)
        out = []
        for view, cur in zip(jobs, current):
            moved = self._moved.get(view.name)
            keep = (cur is not None and moved is not None and moved[0] == view.placement
                    and moved[1] == view.steps and left.get(configs[cur].gpu_type, 0)
                    >= configs[cur].gpus)
            if keep and cur is not None:
                left[configs[cur].gpu_type] -= configs[cur].gpus
            out.append(keep)
        return out

    def _remember_moves(self, jobs: tuple[JobView, ...], out: dict[str, Assignment]) -> None:
        """Note the jobs this decision moves (placement given, steps now); forget the others."""
        moved = {}
        for view in jobs:
            given = out.get(view.name)
            if given is not None and given.placement != view.placement:
                moved[view.name] = (given.placement, view.steps)
            elif view.name in self._moved and view.placement == self._moved[view.name][0]:
                moved[view.name] = self._moved[view.name]
        self._moved = moved

    def _goodputs(self, view: JobView, configs: list[Config], order: list[int], counts: list[int],
                  total_gpus: int, out: np.ndarray, ask: Callable[[int, GoodputFunction], None]
                  ) -> None:
        """Fill `out` (one row of the program, zeros) with `view`'s goodput on each allowed
        configuration: those between its `min_gpus` and `job_cap` (`order`/`counts`: the
        configuration indices by GPU count), on its `gpu_type` when it names one. Where the
        goodput comes from the job's model, `ask(config index, goodput function)` instead."""
        spec = view.spec
        silent = is_silent(view, self.params.silent_after_s)
        if silent:  # its requested count, or the largest configuration below it (Sia has
            # no 6-GPU configuration on 4-GPU nodes: without this the job never ran again)
            want = max(1, min(max(spec.gpus, spec.min_gpus), spec.max_gpus, total_gpus))
            low, high = counts[max(bisect_right(counts, want) - 1, 0)], want
        else:
            low, high = spec.min_gpus, job_cap(view, total_gpus)
        est = view.estimator
        for i in order[bisect_left(counts, low):bisect_right(counts, high)]:
            c = configs[i]
            if spec.gpu_type is not None and c.gpu_type != spec.gpu_type:
                continue
            if silent:
                out[i] = float(c.gpus)  # a silent job: its requested count, linear goodput
                continue
            src = model_type(view, c.gpu_type)
            if src is None or est is None:
                out[i] = 1.0 if c.gpus == 1 else 0.0
                continue
            fn = est.goodput_fn(src)
            if fn is not None:  # a model without data yet: goodput 0, as no batch is known
                ask(i, fn)

    def decide(self, snapshot: Snapshot) -> Decision:
        if not snapshot.jobs:
            return Decision({})
        program = self.program(snapshot)
        choice, self.last_objective = solve(program)
        out = self.place(snapshot, program.configs, choice)
        row = {view.name: j for j, view in enumerate(snapshot.jobs)}

        def why(view: JobView, a: Assignment) -> str:
            j = row[view.name]
            cur, new = program.current[j], choice[j]
            figures = ("" if cur is None or new is None else
                       f" (goodput {program.goodput[j, new]:.3g} against "
                       f"{program.goodput[j, cur]:.3g} where it ran)")
            return (f"its program chose {a.placement.num_gpus} GPU(s) for it, more goodput "
                    "for the others" + figures)
        return Decision(out, waiting_reasons(
            snapshot.jobs, out, snapshot.cluster, self.name,
            "its program chose no (GPU type, count) for it: more goodput elsewhere",
            need=lambda v: max(1, v.spec.min_gpus)), shrink_reasons(snapshot.jobs, out,
                                                                    self.name, why))

    def place(self, snapshot: Snapshot, configs: Sequence[Config], choice: Sequence[int | None]
              ) -> dict[str, Assignment]:
        """The assignments of a program's `choice` (a configuration index or None per job, in
        `snapshot.jobs` order), packed per type (`_pack`), in job order; remembers the moves
        (`keep_restarting`). `corral` places its own program's choice through it."""
        cluster = snapshot.cluster
        out: dict[str, Assignment] = {}
        for t in cluster.gpu_types:
            wanted = [(view, configs[c].gpus) for view, c in zip(snapshot.jobs, choice)
                      if c is not None and configs[c].gpu_type == t]
            views = {view.name: view for view, _ in wanted}
            for name, placement in _pack(cluster, t, wanted).items():
                held = views[name].placement
                out[name] = Assignment(held if placement == held else placement)
        self._remember_moves(snapshot.jobs, out)
        return {v.name: out[v.name] for v in snapshot.jobs if v.name in out}


def _pack(cluster: Cluster, gpu_type: str, wanted: list[tuple[JobView, int]]
          ) -> dict[str, Placement]:
    """Placements (by job name) on `gpu_type`'s nodes for jobs wanting that many GPUs (§3.5): jobs
    kept at their configuration keep their GPUs, the others are packed largest first on as few
    nodes as possible (`consolidated`); where one finds no room, the type is packed again from
    empty, largest first (current placements reused where they fit); a job still without room
    waits a round. Each job picks its batch (`batch=None`)."""
    first = _pack_once(cluster, gpu_type, wanted, keep_first=True)
    if len(first) == len(wanted):
        return first
    second = _pack_once(cluster, gpu_type, wanted, keep_first=False)
    return second if len(second) > len(first) else first


def _pack_once(cluster: Cluster, gpu_type: str, wanted: list[tuple[JobView, int]],
               keep_first: bool) -> dict[str, Placement]:
    nodes = cluster.nodes_of_type(gpu_type)
    free = list(cluster.gpus_per_node)
    for n in range(len(free)):
        if cluster.node_types[n] != gpu_type:
            free[n] = 0
    out: dict[str, Placement] = {}
    movers = []
    for view, k in wanted:
        cur = view.placement
        if (keep_first and cur.slots and cur.num_gpus == k
                and cluster.placement_type(cur) == gpu_type and fits(free, cur)):
            take(free, cur)
            out[view.name] = cur
        else:
            movers.append((view, k))
    movers.sort(key=lambda m: (-m[1], m[0].spec.submit_time_s, m[0].name))
    for view, k in movers:
        cur = view.placement
        if (cur.slots and cur.num_gpus == k and cluster.placement_type(cur) == gpu_type
                and fits(free, cur)):
            placement: Placement | None = cur
        else:
            packed = consolidated([free[n] for n in nodes], k)
            placement = (None if packed is None
                         else Placement(tuple((nodes[i], g) for i, g in packed.slots)))
        if placement is not None:
            take(free, placement)
            out[view.name] = placement
    return out


class _Asks:
    """The (job, configuration) goodputs a round needs from the jobs' models, gathered so
    `fill` computes them all in one `best_goodputs` call."""

    def __init__(self) -> None:
        self.fns: list[GoodputFunction] = []
        self._fn_index: dict[int, int] = {}
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.which: list[int] = []

    def row(self, j: int) -> Callable[[int, GoodputFunction], None]:
        def ask(i: int, fn: GoodputFunction) -> None:
            k = self._fn_index.get(id(fn))
            if k is None:
                k = self._fn_index[id(fn)] = len(self.fns)
                self.fns.append(fn)
            self.rows.append(j)
            self.cols.append(i)
            self.which.append(k)
        return ask

    def fill(self, goodput: np.ndarray, configs: list[Config]) -> None:
        """Write each asked goodput into `goodput[job, config]` (0 where not finite)."""
        if not self.rows:
            return
        cols = np.array(self.cols)
        nodes = np.array([configs[i].nodes for i in self.cols])
        gpus = np.array([configs[i].gpus for i in self.cols])
        best = best_goodputs(self.fns, np.array(self.which), nodes, gpus)
        goodput[np.array(self.rows), cols] = np.where(np.isfinite(best), best, 0.0)
