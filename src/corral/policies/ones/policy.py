"""`ones`: ONES, online evolutionary batch-size orchestration (Bian et al., SC'21).

A job keeps a per-GPU batch b (its M0), so its GPU count n sets its batch B = n b (linear LR
scaling, §3.3.2). Each round `ones_search` evolves schedules towards the least SRUF utilisation
`sum_j n_j T_j(B_j)` (Eq. 3-5), T_j = remaining epochs `s (1 - p) / p` (Eq. 7, p from
`corral.perf.progress`) x seconds per epoch. Limit L (§3.3.2) caps a job at floor(L / b) GPUs:
one GPU's batch, doubled per epoch; after preemption its old batch, halved per changed schedule
that leaves it waiting. Decided here: work in epochs of the application's mean width; a job's
GPUs frozen until it ends an epoch (`deploy=all`: global rule); Convoy off (`convoy`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import Assignment, BatchConfig, Decision, JobView, Snapshot
from corral.core.policy import Changes, Policy, Promises, Reads, register_policy
from corral.core.reasons import waiting_reasons
from corral.perf.progress import EpochLog, JobLog, ProgressPredictor
from corral.perf.throughput import ThroughputParams, iteration_time
from corral.policies.ones.search import IDLE, Round, Search
from corral.policies.placement import anywhere, free_gpus, take

__all__ = ["Ones", "OnesParams"]

_NONE = Assignment(Placement())


@dataclass
class OnesParams:
    iterations: int = 5  # evolution iterations per scheduling round
    population: int = 0  # 0: the cluster's GPU count (paper)
    crossover_pairs: int = 0  # 0: population / 2
    mutants: int = 0  # 0: population / 2
    mutation_rate: float = 0.1
    deploy: str = "job"  # "job": per-job epoch rule; "all": the paper's literal global rule
    convoy: bool = False  # shrink the limits of jobs running longer than the arrival interval
    max_points: int = 256  # GPR training-set cap
    refit_s: float = 1800.0  # refit a job's throughput model at most this often
    seed: int = 0

    def __post_init__(self) -> None:
        if self.deploy not in ("job", "all"):
            raise ValueError(f"deploy must be 'job' or 'all', got {self.deploy!r}")
        if self.iterations < 0 or self.population < 0 or not 0 <= self.mutation_rate <= 1:
            raise ValueError("iterations and population must be >= 0, mutation_rate in [0, 1]")


@dataclass
class _JobState:
    """What ONES remembers of a job between rounds."""

    local_bsz: int  # b: fixed per-GPU batch
    limit_bsz: int  # L: largest global batch allowed now
    epoch: int = 0  # epochs seen so far
    ran: bool = False  # has held GPUs
    held_bsz: int = 0  # global batch at its last deployment (its batch before preemption)


@register_policy
class Ones(Policy):
    name = "ones"
    summary = ("ONES: evolutionary search over per-GPU schedules, batch size grows with GPUs, "
               "SRUF with GPR progress")
    Params = OnesParams
    #: finished jobs: epoch widths and the progress predictor's history
    promises = Promises(reads=Reads.VIEWS | Reads.COMPLETED,
                        reacts_to=Changes.ARRIVAL | Changes.COMPLETION | Changes.NODES)

    def __init__(self, params: OnesParams | None = None) -> None:
        super().__init__(params)
        self.rng = np.random.default_rng(self.params.seed)
        self.predictor = ProgressPredictor(self.params.max_points, self.params.seed)
        self._jobs: dict[str, _JobState] = {}
        self._ids: dict[str, int] = {}  # stable id per job name for the stored population
        self._next_id = 0  # ids are never reused: the stored population may hold a gone job's
        self._population: np.ndarray | None = None  # genes are stable ids
        self._width: dict[str, float] = {}  # app -> mean epoch width (scale-invariant iterations)
        self._arrivals: list[float] = []
        self._completed_seen = 0
        self._speed_cache: dict[str, tuple[object, np.ndarray, float]] = {}

    # -- per-job state ------------------------------------------------------------------------
    def job_left(self, name: str) -> None:
        """Forget the job's limits, speed table and population id (its genes in the stored
        population read as idle from now on)."""
        self._jobs.pop(name, None)
        self._speed_cache.pop(name, None)
        self._ids.pop(name, None)

    def _state(self, view: JobView) -> _JobState:
        st = self._jobs.get(view.name)
        if st is None:
            spec = view.spec
            b = min(max(spec.init_bsz, spec.min_local_bsz), spec.max_local_bsz)
            st = self._jobs[view.name] = _JobState(local_bsz=b, limit_bsz=b)
            self._arrivals.append(spec.submit_time_s)
        return st

    def _interarrival_s(self) -> float:
        t = sorted(self._arrivals)
        return (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 and t[-1] > t[0] else math.inf

    def _update_limits(self, view: JobView, st: _JobState, others_wait: bool) -> None:
        """Scale-up (double per epoch) and the optional Convoy scale-down (§3.3.2)."""
        spec = view.spec
        gained = view.epoch - st.epoch
        st.epoch = view.epoch
        top = max(spec.max_bsz, st.local_bsz)
        for _ in range(max(gained, 0)):
            st.limit_bsz = min(2 * st.limit_bsz, top)
            if self.params.convoy and others_wait and view.run_time_s > 0:
                shrink = min(1.0, self._interarrival_s() / view.run_time_s)
                st.limit_bsz = max(st.local_bsz, int(st.limit_bsz * shrink))

    def _cap(self, view: JobView, st: _JobState, total_gpus: int) -> int:
        spec = view.spec
        if not spec.adaptive:
            most = max(1, spec.batch_size // max(spec.min_local_bsz, 1))
            return max(1, min(spec.max_gpus, most, total_gpus))
        limit = min(st.limit_bsz, spec.max_bsz)
        return max(1, min(limit // st.local_bsz, spec.max_gpus, total_gpus))

    # -- progress -----------------------------------------------------------------------------
    def _learn_widths(self, snapshot: Snapshot) -> None:
        """Mean epoch width per application: completed jobs' if any, else running jobs'."""
        done: dict[str, list[float]] = {}
        running: dict[str, list[float]] = {}
        for v in snapshot.completed:
            if v.epoch > 0:
                done.setdefault(v.spec.app, []).append(v.progress / v.epoch)
        for v in snapshot.jobs:
            if v.epoch > 0:
                running.setdefault(v.spec.app, []).append(v.progress / (v.epoch + 0.5))
        for app in set(done) | set(running):
            self._width[app] = float(np.mean(done.get(app) or running[app]))

    def _width_of(self, view: JobView) -> float | None:
        """Scale-invariant iterations per epoch: the application's, else guessed from the job's
        own progress as if it were half-way through its current epoch; None before any."""
        w = self._width.get(view.spec.app)
        if w is None and view.progress > 0:
            w = view.progress / (view.epoch + 0.5)
        return w

    def _epochs_done(self, view: JobView) -> float:
        w = self._width_of(view)
        return max(view.progress / w, float(view.epoch)) if w else float(view.epoch)

    def _epoch_size(self, view: JobView) -> float:
        """E: samples per epoch at M0 (1 before anything is known: then nothing is done)."""
        return (self._width_of(view) or 1.0) * view.spec.init_bsz

    def _log(self, view: JobView, done: float) -> EpochLog:
        metrics = [m for _, _, m in view.metrics]
        return EpochLog(self._epoch_size(view), done, metrics[-1] if metrics else 0.0,
                        metrics[0] if metrics else 0.0)

    def _history(self, snapshot: Snapshot) -> list[JobLog]:
        out = []
        for v in snapshot.completed:
            metrics = {e: m for _, e, m in v.metrics}
            first = metrics.get(1, 0.0)
            logs = [EpochLog(self._epoch_size(v), k, metrics.get(k, 0.0), first)
                    for k in range(1, v.epoch)]
            out.append(JobLog(logs, float(v.epoch)))
        return out

    # -- speed --------------------------------------------------------------------------------
    def _epoch_seconds(self, view: JobView, st: _JobState, now_s: float, total_gpus: int,
                       per_node: int) -> np.ndarray:
        """Seconds per epoch on 0..G GPUs (packed), index 0 unused; ones without a model.

        The job's fitted throughput model is refitted (when it has new measurements) at most
        every `refit_s` seconds, so that a job trying many configurations does not refit at
        every round.
        """
        est = view.estimator
        cached = self._speed_cache.get(view.name)
        if est is None or not est.has_observations:
            return np.ones(total_gpus + 1)
        if (cached is None or (est.is_stale and now_s - cached[2] >= self.params.refit_s)
                or len(cached[1]) != total_gpus + 1):  # the cluster (or a queue's share) resized
            params = est.throughput_params()
            cached = self._speed_cache[view.name] = (params, _seconds_per_sample(
                view, st.local_bsz, params, total_gpus, per_node), now_s)
        return self._epoch_size(view) * cached[1]

    # -- the round ----------------------------------------------------------------------------
    def decide(self, snapshot: Snapshot) -> Decision:
        cluster = snapshot.cluster
        total, per_node = cluster.total_gpus, cluster.max_node_gpus
        views = list(snapshot.jobs)
        states = [self._state(v) for v in views]
        self._learn_widths(snapshot)
        if len(snapshot.completed) != self._completed_seen:
            self._completed_seen = len(snapshot.completed)
            self.predictor.fit(self._history(snapshot))
        waiting = [not v.is_running for v in views]
        for v, st, idle in zip(views, states, waiting):
            self._update_limits(v, st, sum(waiting) > idle)
        done = np.array([self._epochs_done(v) for v in views])
        alpha, beta = self.predictor.beta_params([self._log(v, d) for v, d in zip(views, done)])
        current = _layout(cluster, views)
        rnd = Round(
            caps=np.array([self._cap(v, st, total) for v, st in zip(views, states)], dtype=np.int64),
            frozen=self._frozen(views, current),
            new=np.array([not st.ran and not v.is_running for v, st in zip(views, states)]),
            epoch_s=np.stack([self._epoch_seconds(v, st, snapshot.time_s, total, per_node)
                              for v, st in zip(views, states)]) if views else np.ones((0, total + 1)),
            done=done, alpha=alpha, beta=beta)
        best = self._search(rnd, views, current)
        decision = self._deploy(cluster, views, states, best)
        self._after_deploy(views, states, decision)
        return Decision(decision.assignments, waiting_reasons(
            views, decision.assignments, cluster, self.name,
            "its search gave the GPUs to jobs that cut the GPU time still to run most",
            need=lambda v: max(1, v.spec.min_gpus)))

    @staticmethod
    def _after_deploy(views: list[JobView], states: list[_JobState], decision: Decision) -> None:
        """Resume rule (§3.3.2): a preempted job may ask for no more than its batch before
        preemption, and half of that each time a new schedule leaves it waiting."""
        new_schedule = any((decision.get(v.name) or _NONE).placement != v.placement for v in views)
        for v, st in zip(views, states):
            a = decision.get(v.name)
            if a is not None:
                st.ran = True
                st.held_bsz = a.batch.total(a.num_gpus) if a.batch else 0
            elif st.ran and v.is_running:
                st.limit_bsz = min(st.limit_bsz, st.held_bsz or st.limit_bsz)
            elif st.ran and new_schedule:
                st.limit_bsz = max(st.local_bsz, st.limit_bsz // 2)

    def _frozen(self, views: list[JobView], current: np.ndarray) -> np.ndarray:
        """Jobs that have not finished an epoch since their last change keep their GPUs."""
        settling = np.array([v.is_running and v.epochs_since_change < 1 for v in views] + [False])
        if self.params.deploy == "all" and settling.any():
            settling = np.array([v.is_running for v in views] + [False])
        return np.where(settling[current], current, IDLE)

    def _search(self, rnd: Round, views: list[JobView], current: np.ndarray) -> np.ndarray:
        """Evolve the stored population on this round; the best genome (round indices)."""
        size = self.params.population or len(current)
        half = max(1, size // 2)
        search = Search(size, self.params.crossover_pairs or half, self.params.mutants or half,
                        self.params.mutation_rate, self.rng)
        for v in views:
            if v.name not in self._ids:
                self._ids[v.name] = self._next_id
                self._next_id += 1
        to_round = np.full(self._next_id + 1, IDLE)  # ids of jobs that left -> IDLE
        to_round[[self._ids[v.name] for v in views]] = np.arange(len(views))
        if self._population is None or self._population.shape[1] != len(current):
            pop = np.concatenate([current[None], search.random_genomes(rnd, current, size - 1)])
        else:
            stored = self._population
            pop = np.concatenate([to_round[stored], current[None]])  # IDLE (-1) -> IDLE
        pop = search.evolve(pop, rnd, self.params.iterations)
        ids = np.array([self._ids[v.name] for v in views] + [IDLE])
        self._population = ids[pop]
        return pop[0]

    def _deploy(self, cluster: Cluster, views: list[JobView], states: list[_JobState],
                genome: np.ndarray) -> Decision:
        """Assignments of the chosen genome; jobs whose GPU count is unchanged stay put."""
        per_node = np.repeat(np.arange(cluster.num_nodes), cluster.gpus_per_node)
        counts = np.bincount(genome[genome != IDLE], minlength=len(views))
        out: dict[str, Assignment] = {}
        keep = [i for i, v in enumerate(views) if v.is_running and v.num_gpus == counts[i] > 0]
        for i in keep:
            out[views[i].name] = self._assignment(views[i], states[i], views[i].placement)
        free = free_gpus(cluster, out)
        for i, v in enumerate(views):
            if counts[i] == 0 or v.name in out:
                continue
            wanted = Placement.from_dense(
                np.bincount(per_node[genome == i], minlength=cluster.num_nodes).tolist())
            if not all(free[n] >= g for n, g in wanted.slots):
                placed = anywhere(free, int(counts[i]))
                assert placed is not None  # (the genome's GPU counts fit the cluster)
                wanted = placed
            take(free, wanted)
            out[v.name] = self._assignment(v, states[i], wanted)
        return Decision(out)

    @staticmethod
    def _assignment(view: JobView, st: _JobState, placement: Placement) -> Assignment:
        if not view.spec.adaptive:
            return Assignment.user_config(view.spec, placement)
        return Assignment(placement, BatchConfig(st.local_bsz))


def _seconds_per_sample(view: JobView, local_bsz: int, params: ThroughputParams, total_gpus: int,
                        per_node: int) -> np.ndarray:
    """Step time / global batch on 0..G packed GPUs (index 0 unused, 1.0)."""
    spec = view.spec
    n = np.arange(1, total_gpus + 1)
    if spec.adaptive:
        local, accum = np.full(n.size, local_bsz), np.zeros(n.size)
    else:
        cfgs = [spec.user_batch(int(k)) for k in n]
        local = np.array([c.local_bsz for c in cfgs])
        accum = np.array([c.accum_steps for c in cfgs])
    step_s = np.asarray(iteration_time(params, np.ceil(n / per_node), n, local, accum))
    return np.concatenate([[1.0], step_s / (n * local * (accum + 1))])


def _layout(cluster: Cluster, views: list[JobView]) -> np.ndarray:
    """The current allocation as a genome (round job indices on each node's GPUs)."""
    genome = np.full(cluster.total_gpus, IDLE)
    start = np.concatenate([[0], np.cumsum(cluster.gpus_per_node)[:-1]]).astype(int)
    used = [0] * cluster.num_nodes
    for i, v in enumerate(views):
        for node, gpus in v.placement.slots:
            s = start[node] + used[node]
            genome[s:s + gpus] = i
            used[node] += gpus
    return genome
