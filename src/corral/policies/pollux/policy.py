"""`pollux`: goodput-optimised co-adaptive scheduling (Qiao et al., OSDI'21, §4.2 PolluxSched).

Each round turns every job's fitted goodput into SPEEDUP_j (Eq. 15, `pollux_speedup`) and
searches (`corral.policies.pollux.search`) for the allocation maximising FITNESS_p (Eq. 14), a changed job's
speedup times REALLOC_FACTOR = (T_j - R_j δ) / (T_j + δ) (R_j its relaunches, `JobView.relaunches`:
δ is a checkpoint-restart's delay, which an in-place resize does not pay), warm-started from last
round; jobs pick their own batch (`corral.perf.agent.choose_batch`). Decided here, after the artifact: fair
share ceil(G/J) GPUs; no model means linear scaling; caps by `max_gpus_for` (twice the most GPUs
observed); silent jobs (`is_silent`) get their requested GPUs; priority by attained GPU-s; big
clusters searched in part (`pollux_nodes`) by a smaller population (`search_population`);
patience grows with time (`search_patience`); jobs the search leaves out take its idle GPUs
where the fitness gains (`fill_idle`), and above the artifact's 16 nodes running jobs then
grow into them (`grow_idle`); there a round whose current allocation, filled and grown so, no
search could beat is not searched (`settled`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import Assignment, Decision, JobView, Snapshot
from corral.core.policy import Policy, register_policy
from corral.core.reasons import shrink_reasons, waiting_reasons
from corral.policies.pollux.fill import fill_idle
from corral.policies.pollux.grow import Slots, grow_idle
from corral.policies.pollux.nodes import (
    ARTIFACT_NODES,
    SEARCH_ALL_NODES_UP_TO,
    move_columns,
    search_nodes,
)
from corral.policies.pollux.search import (
    AllocationProblem,
    SearchSettings,
    SpeedupTable,
    genetic_search,
    remap_population,
)
from corral.policies.pollux.settled import settled
from corral.policies.pollux.speedup import SpeedupGrids

__all__ = ["PolluxParams", "Pollux", "realloc_factor", "max_gpus_for", "is_silent",
           "search_patience", "search_population"]

#: Most nodes one job may span (artifact).
MAX_NODES_PER_JOB = 16


@dataclass
class PolluxParams:
    p: float = -1.0  # fairness knob: power-mean exponent (1 = mean, -> -inf = max-min)
    restart_penalty_s: float = 30.0  # δ, the re-allocation delay assumed by the penalty
    population: int = 100
    generations: int = 100
    patience: int = 5  # stop after this many generations without improvement (0 = never) ...
    patience_period_s: float = 60.0  # ... per this much time since the last search (0: per search)
    interference_avoidance: bool = True  # at most one distributed job per node
    seed: int = 0
    #: run time without an observed step after which a job is silent: longer than any restart
    #: pause its data may charge (imagenet 250 s in Sia's artifact), which holds GPUs without a step
    silent_after_s: float = 600.0
    #: jobs the search left out take its idle GPUs where the fitness gains (`fill_idle`); off:
    #: the search's best as it is (fewer jobs on more GPUs each: lower average JCT on bursts)
    fill_idle_gpus: bool = True
    #: on clusters above `ARTIFACT_NODES` nodes, running jobs then grow into idle GPUs where
    #: the fitness gains (`grow_idle`); off: the search's (and fill's) counts as they are
    grow_idle_gpus: bool = True
    #: most individuals on clusters above `SEARCH_ALL_NODES_UP_TO` nodes (`search_population`);
    #: 0: `population` there too (the artifact's search)
    large_population: int = 32

    def __post_init__(self) -> None:
        if not math.isfinite(self.p):
            raise ValueError("p must be finite")
        if self.restart_penalty_s < 0:
            raise ValueError("restart_penalty_s must be >= 0")
        if self.population < 2 or self.generations < 0 or self.patience < 0:
            raise ValueError("need population >= 2, generations >= 0, patience >= 0")
        if self.large_population < 0 or self.large_population == 1:
            raise ValueError("large_population must be 0 (off) or >= 2")
        if self.silent_after_s < 0:
            raise ValueError("silent_after_s must be >= 0")
        if not self.patience_period_s >= 0:
            raise ValueError("patience_period_s must be >= 0")


def realloc_factor(age_s: float, restarts: int, delay_s: float) -> float:
    """REALLOC_FACTOR = max(T - R δ, 0) / (T + δ), R the job's restarts that each paid δ;
    1 when δ = 0 (restarts cost nothing)."""
    if delay_s <= 0:
        return 1.0
    return max(age_s - restarts * delay_s, 0.0) / (age_s + delay_s)


def search_patience(patience: int, since_last_s: float | None, period_s: float) -> int:
    """Generations without improvement before the search stops: `patience` per `period_s` of
    time since the previous search (never less than `patience`; 0 stays 0, never stop early).

    The search warm-starts from the previous round's population, so searches `period_s` apart
    add up; one that comes later gets the generations the rounds in between would have run.
    The first search (`since_last_s` None) and `period_s` 0 get `patience` as it is.
    """
    if patience == 0 or since_last_s is None or period_s <= 0:
        return patience
    return max(patience, math.ceil(patience * since_last_s / period_s - 1e-9))


#: On clusters above `SEARCH_ALL_NODES_UP_TO` nodes: individuals per job searched, and the
#: fewest (`search_population`).
POPULATION_PER_JOB = 2
MIN_POPULATION = 16


def search_population(population: int, num_jobs: int, num_nodes: int,
                      large_population: int) -> int:
    """Individuals in a round's search: `population` on clusters of at most
    `SEARCH_ALL_NODES_UP_TO` nodes (the artifact's, draw for draw: the stored reference
    figures) or where `large_population` is 0; above, `POPULATION_PER_JOB` per job, at least
    `MIN_POPULATION`, at most `large_population` (and `population`).

    A generation's cost follows its individuals times the nodes searched, and on the busiest
    Philly day (512 nodes) a population of 100 found an allocation within 1 % of the fitness
    that 16-32 find in all but a few of 206 captured rounds, at 2.5-3.5x the cost (issue 45).
    """
    if large_population == 0 or num_nodes <= SEARCH_ALL_NODES_UP_TO:
        return population
    return max(2, min(population, large_population,
                      max(MIN_POPULATION, POPULATION_PER_JOB * num_jobs)))


def is_silent(view: JobView, silent_after_s: float) -> bool:
    """The job has run `silent_after_s` seconds and observed no step: it never reports."""
    observed = view.estimator.max_gpus_observed if view.estimator is not None else 0
    return observed == 0 and view.run_time_s >= silent_after_s


def max_gpus_for(view: JobView, total_gpus: int, silent_after_s: float = math.inf) -> int:
    """The most GPUs the search may give a job (exploration cap and hard limits); a silent job
    (`is_silent`) gets its requested count."""
    spec = view.spec
    if is_silent(view, silent_after_s):
        return max(1, min(max(spec.gpus, spec.min_gpus), spec.max_gpus, total_gpus))
    observed = view.estimator.max_gpus_observed if view.estimator is not None else 0
    explore = max(2 * observed, view.num_gpus, spec.min_gpus, 1)
    batch = spec.max_bsz if spec.adaptive else spec.batch_size
    return max(1, min(explore, spec.max_gpus, max(batch // spec.min_local_bsz, 1), total_gpus))


@register_policy
class Pollux(Policy):
    name = "pollux"
    summary = "goodput-optimised co-adaptive scheduling: GA over allocations, jobs pick their batch"
    Params = PolluxParams

    def __init__(self, params: PolluxParams | None = None) -> None:
        super().__init__(params)
        self._rng = np.random.default_rng(self.params.seed)
        self._grids = SpeedupGrids()
        self._last: tuple[tuple[str, ...], tuple[int, ...], np.ndarray] | None = None
        self._searched = np.arange(0)  # the nodes the last search spanned (`pollux_nodes`)
        self._last_search_s: float | None = None  # when the population in _last was searched
        #: Generations the last search ran, jobs `fill_idle` placed and `grow_idle` grew after it
        #: (benchmarks).
        self.last_generations = 0
        self.last_filled = 0
        self.last_grown = 0
        #: Rounds not searched: no job could gain from any change (`settled`).
        self.rounds_settled = 0

    @property
    def settings(self) -> SearchSettings:
        prm = self.params
        return SearchSettings(population=prm.population, generations=prm.generations,
                              patience=prm.patience, max_nodes_per_job=MAX_NODES_PER_JOB,
                              avoid_interference=prm.interference_avoidance)

    def decide(self, snapshot: Snapshot) -> Decision:
        jobs = sorted(snapshot.jobs, key=lambda v: (v.attained_gpu_s, v.spec.submit_time_s, v.name))
        if not jobs:
            self._last = self._last_search_s = None
            return Decision({})
        problem = self.problem(snapshot.time_s, snapshot.cluster, jobs)
        large = snapshot.cluster.num_nodes > ARTIFACT_NODES  # small: the artifact's draws
        if large:  # the current allocation, filled and grown: if no search could beat it ...
            held = np.nonzero(problem.base)  # by job, then node
            now = self._fill_and_grow(problem, held[0], held[1], problem.base[held], True)
            if settled(problem, MAX_NODES_PER_JOB, self.params.interference_avoidance,
                       _allocation(problem.base.shape, *now)):
                self.rounds_settled += 1  # ... it is the round's answer, and nothing is drawn
                return self._decision(snapshot, jobs, problem, np.arange(len(problem.node_gpus)),
                                      *now)
        names = tuple(v.name for v in jobs)
        settings = replace(self.settings, patience=search_patience(
            self.params.patience, self._since_last_search(names, snapshot.time_s),
            self.params.patience_period_s), population=search_population(
            self.params.population, len(jobs), snapshot.cluster.num_nodes,
            self.params.large_population))
        seeds = self._warm_start(names, problem.node_gpus)
        seeded = None
        if seeds is not None:
            seeded = self._searched[(seeds < len(jobs)).any(axis=(0, 2))]
        nodes = search_nodes(problem.node_gpus, problem.base, problem.max_gpus, seeded)
        if seeds is not None:
            seeds = move_columns(seeds, self._searched, nodes, problem.node_gpus, len(jobs))
        whole = problem
        if len(nodes) < len(problem.node_gpus):
            problem = replace(problem, node_gpus=problem.node_gpus[nodes],
                              base=problem.base[:, nodes])
        result = genetic_search(problem, settings, self._rng, seeds)
        self._last = (names, tuple(int(g) for g in snapshot.cluster.gpus_per_node),
                      result.population)
        self._searched = nodes
        self._last_search_s = snapshot.time_s
        self.last_generations = result.generations
        after = self._fill_and_grow(problem, *result.entries(), large)
        return self._decision(snapshot, jobs, whole, nodes, *after)

    def _fill_and_grow(self, problem: AllocationProblem, job_ids: np.ndarray,
                       node_ids: np.ndarray, gpu_counts: np.ndarray, grow: bool
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, Slots]]:
        """An allocation's (job, node, GPUs) entries with `fill_idle`'s placements added (by
        job, then node), and `grow_idle`'s growth of them when `grow` (each where its param is
        on); records `last_filled` and `last_grown`."""
        settings = self.settings
        added = (fill_idle(problem, job_ids, node_ids, gpu_counts, settings.avoid_interference)
                 if self.params.fill_idle_gpus else [])
        self.last_filled = len({j for j, _, _ in added})
        if added:  # by job, then node, as `entries`
            job_ids, node_ids, gpu_counts = (np.array(c, dtype=np.int64) for c in zip(*sorted(
                [*zip(job_ids.tolist(), node_ids.tolist(), gpu_counts.tolist()), *added])))
        grown = (grow_idle(problem, job_ids, node_ids, gpu_counts, MAX_NODES_PER_JOB)
                 if grow and self.params.grow_idle_gpus else {})
        self.last_grown = len(grown)
        return job_ids, node_ids, gpu_counts, grown

    def _decision(self, snapshot: Snapshot, jobs: list[JobView], problem: AllocationProblem,
                  nodes: np.ndarray, job_ids: np.ndarray, node_ids: np.ndarray,
                  gpu_counts: np.ndarray, grown: dict[int, Slots]) -> Decision:
        """The round's decision from (job, node, GPUs) entries over the nodes `nodes` (indices
        into the cluster's), with `grow_idle`'s growth applied, and why each job waits or
        shrinks."""
        per_job: dict[int, list[tuple[int, int]]] = {}
        for j, n, g in zip(job_ids.tolist(), node_ids.tolist(), gpu_counts.tolist()):
            per_job.setdefault(j, []).append((int(nodes[n]), g))
        for j, new in grown.items():
            per_job[j] = [(int(nodes[n]), g) for n, g in new]
        out = {}
        for j, cells in per_job.items():
            view = jobs[j]
            placement = Placement(tuple(cells))
            out[view.name] = Assignment(view.placement if placement == view.placement
                                        else placement)
        return Decision(out, waiting_reasons(
            jobs, out, snapshot.cluster, self.name, "placed lower than running jobs by goodput",
            need=lambda v: max(1, v.spec.min_gpus)),
            shrink_reasons(jobs, out, self.name, _shrink_words(problem, jobs)))

    def _since_last_search(self, names: tuple[str, ...], now_s: float) -> float | None:
        """Seconds since the last search, if it searched any of these jobs (else None: its
        population says nothing about them, as after the cluster ran empty)."""
        if self._last is None or self._last_search_s is None or not set(names) & set(self._last[0]):
            return None
        return now_s - self._last_search_s

    def _warm_start(self, names: tuple[str, ...], node_gpus: np.ndarray) -> np.ndarray | None:
        """Last round's final population re-indexed to this round's jobs (None if unusable),
        over the nodes the last search spanned (`_searched`)."""
        if self._last is None:
            return None
        old_names, old_nodes, pop = self._last
        if old_nodes != tuple(int(g) for g in node_gpus):
            return None
        index = {n: i for i, n in enumerate(names)}
        old_to_new = np.array([index.get(n, -1) for n in old_names], dtype=np.int64)
        return remap_population(pop, old_to_new, len(names))

    # -- building the round's problem ---------------------------------------------------------
    def problem(self, now_s: float, cluster: Cluster, jobs: list[JobView]) -> AllocationProblem:
        """The search problem for `jobs` (already in priority order) at time `now_s`."""
        total = cluster.total_gpus
        num_nodes = cluster.num_nodes
        fair_gpus = math.ceil(total / len(jobs))
        fair_nodes = math.ceil(num_nodes / total)
        scale = num_nodes / total
        max_nodes = min(MAX_NODES_PER_JOB, num_nodes)
        delay = self.params.restart_penalty_s
        self._grids.forget_except({v.name for v in jobs})
        caps = [max_gpus_for(v, total, self.params.silent_after_s) for v in jobs]
        tables = self._grids.tables(
            [(v.name, v.estimator.goodput_fn() if v.estimator is not None else None,
              min(max_nodes, cap), cap) for v, cap in zip(jobs, caps)], fair_nodes, fair_gpus, scale)
        return AllocationProblem(
            node_gpus=np.array(cluster.gpus_per_node, dtype=np.int64),
            base=_current_allocation(jobs, num_nodes),
            max_gpus=np.array(caps, dtype=np.int64),
            min_gpus=np.array([v.spec.min_gpus for v in jobs], dtype=np.int64),
            speedup=SpeedupTable(tables),
            penalty=np.array([realloc_factor(now_s - v.spec.submit_time_s, v.relaunches, delay)
                              for v in jobs]),
            p=float(self.params.p))


def _allocation(shape: tuple[int, ...], job_ids: np.ndarray, node_ids: np.ndarray,
                gpu_counts: np.ndarray, grown: dict[int, Slots]) -> np.ndarray:
    """The (jobs, nodes) allocation of (job, node, GPUs) entries with `grow_idle`'s
    `{job: (node, GPUs) pairs}` applied."""
    out = np.zeros(shape, dtype=np.int64)
    out[job_ids, node_ids] = gpu_counts
    for j, slots in grown.items():
        out[j] = 0
        for node, gpus in slots:
            out[j, node] = gpus
    return out


def _current_allocation(jobs: list[JobView], num_nodes: int) -> np.ndarray:
    """(J, nodes) GPUs each job holds on each node now."""
    cells = [(j, node, gpus) for j, v in enumerate(jobs) for node, gpus in v.placement.slots]
    out = np.zeros((len(jobs), num_nodes), dtype=np.int64)
    if cells:
        job, node, gpus = np.array(cells, dtype=np.int64).T
        out[job, node] = gpus
    return out


def _speedup(problem: AllocationProblem, j: int, placement: Placement) -> float | None:
    """Job `j`'s speedup on `placement` from the search's table (None beyond it)."""
    grid = problem.speedup.grid(j)
    nodes, gpus = len(placement.slots), placement.num_gpus
    return float(grid[nodes, gpus]) if gpus < grid.shape[1] and nodes < len(grid) else None


def _shrink_words(problem: AllocationProblem, jobs: list[JobView],
                  ) -> Callable[[JobView, Assignment], str]:
    """Why the search shrank a running job: the GPUs it gave up raise the round's fitness more
    on other jobs, with its speedup before and after (`Decision.shrinks`)."""
    index = {v.name: j for j, v in enumerate(jobs)}

    def why(view: JobView, a: Assignment) -> str:
        j = index[view.name]
        now, new = _speedup(problem, j, view.placement), _speedup(problem, j, a.placement)
        figures = ("" if now is None or new is None else
                   f" (its speedup {new:.2f} on {a.placement.num_gpus} GPU(s) against "
                   f"{now:.2f} on {view.placement.num_gpus})")
        return "more goodput over all jobs with its GPUs given to others" + figures
    return why
