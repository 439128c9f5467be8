"""The simulation engine: a clock, arrivals, scheduling rounds, and applying decisions.

The policy is called every `interval_s` (at multiples of it, as the reference simulator) and,
if it asks, at each arrival and completion; rounds a policy promises not to change are skipped.
The round's order, rule and schedule are `corral.core.rounds.Rounds`, as in the live loop.
In between, running jobs advance analytically (`SimJob.advance`), so a round costs time per job,
not per simulated second. Applying a decision touches only jobs whose assignment changes.
A run ends when every job has finished or at the horizon (`corral.sim.loop.horizon`), and says
so (`SimResult.stopped`).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable

from corral.core.cluster import NO_PLACEMENT, Cluster, Placement
from corral.core.deciding import checked_decision
from corral.core.errors import InfeasibleJobError
from corral.core.jobs import Decision, JobSpec, OracleInfo, Snapshot
from corral.core.ledger import completed_view
from corral.core.policy import Changes, Policy
from corral.core.rounds import Rounds
from corral.sim.loop.capping import capped_to_types, chooses_counts
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.gc_pacing import fewer_collections
from corral.sim.loop.horizon import trace_horizon
from corral.sim.loop.job import SimJob
from corral.sim.loop.mechanism import GpuHandover, Mechanism
from corral.sim.loop.results import JobRecord, SimResult, fast_gpu_share
from corral.sim.truth.base import AppTruth, Truth
from corral.sim.truth.one_gpu import one_gpu_profiles
from corral.sim.truth.replay import best_isolated_jct, packed_counts, remaining_at, user_step_times
from corral.sim.truth.scaled import job_app
from corral.sim.workloads import Workload

ProgressHook = Callable[[float], None]
_NO_CHANGE, _COMPLETION = Changes.NONE, Changes.COMPLETION  # read once per step


def check_feasible(workload: Workload, cluster: Cluster, truth: Truth) -> None:
    """Reject a job that can never fit on the cluster, or whose application is unknown.

    A job runs on one GPU type (`corral.core.deciding`): on a cluster of several types it must
    fit on the largest type's GPUs (on its `gpu_type`'s, when it names one), a `gpu_type` the
    cluster lacks is refused, and its application must know every type it may run on.
    """
    total = cluster.total_gpus
    types = cluster.gpu_types
    largest = max((cluster.gpus_of_type(t) for t in types), default=0)
    known: dict[str, tuple[str, ...]] = {}
    for spec in workload.jobs:
        asks = max(spec.gpus, spec.min_gpus)
        if spec.gpu_type is not None and spec.gpu_type not in types:
            raise InfeasibleJobError(
                f"job {spec.name} in {workload.name} may run only on {spec.gpu_type} GPUs, but "
                f"the cluster ({cluster.describe()}) has none")
        if asks > total:
            raise InfeasibleJobError(
                f"job {spec.name} in {workload.name} asks for {asks} GPUs "
                f"but the cluster ({cluster.describe()}) has {total}")
        if spec.gpu_type is not None and asks > cluster.gpus_of_type(spec.gpu_type):
            raise InfeasibleJobError(
                f"job {spec.name} in {workload.name} asks for {asks} {spec.gpu_type} GPUs but "
                f"the cluster ({cluster.describe()}) has {cluster.gpus_of_type(spec.gpu_type)}")
        if asks > largest:
            raise InfeasibleJobError(
                f"job {spec.name} in {workload.name} asks for {asks} GPUs but a job runs on one "
                f"GPU type and the largest type of the cluster ({cluster.describe()}) has "
                f"{largest}")
        truth.app(spec.app)
        if types != ("",):
            have = known.get(spec.app)
            if have is None:
                have = known[spec.app] = truth.gpu_types(spec.app)
            for t in cluster.types_for(spec):
                if t not in have:
                    raise InfeasibleJobError(
                        f"job {spec.name} in {workload.name}: application {spec.app!r} has no "
                        f"step times for GPU type {t!r} of the cluster ({cluster.describe()}); "
                        f"it knows {', '.join(x or repr(x) for x in have)}")


class Simulator:
    """Runs one policy on one workload over a simulated cluster: the time loop finds the next
    moment anything can happen and hands it to `Rounds.step`, with itself as the `World`."""

    # a run's jobs (`_run`), let go when it ends (`run`)
    _arrivals: list[SimJob]
    _active: list[SimJob]
    _done: list[SimJob]
    _done_views: list
    _finished: list[SimJob]  # the jobs that finished at the last step
    _finish_heap: list[tuple[float, int, SimJob]]  # predicted finishes (hints)
    _predicted: dict[int, float]  # the live prediction per job; older heap entries are stale
    _specs: dict[str, JobSpec]  # the active jobs' specs, by name
    _mech: Mechanism  # the config's, each model's own restart pause applied (`Mechanism.for_models`)

    def __init__(self, truth: Truth, policy: Policy, cluster: Cluster,
                 config: EngineConfig | None = None) -> None:
        self.truth = truth
        self.policy = policy
        self.cluster = cluster
        self.config = config or EngineConfig()

    # -- public -------------------------------------------------------------------------------
    def run(self, workload: Workload, on_progress: ProgressHook | None = None) -> SimResult:
        """Simulate `workload` to its end (or the horizon); `on_progress` gets the fraction of
        jobs finished whenever some finish."""
        with fewer_collections():
            try:
                return self._run(workload, on_progress)
            finally:  # the run's jobs go with it, not with the simulator
                self._arrivals, self._active, self._done = [], [], []
                self._done_views, self._finished, self._finish_heap = [], [], []
                self._predicted, self._specs = {}, {}

    def _run(self, workload: Workload, on_progress: ProgressHook | None) -> SimResult:
        started = time.perf_counter()
        if chooses_counts(self.policy):  # a request above one type's GPUs starts from them
            workload = capped_to_types(workload, self.cluster)[0]
        check_feasible(workload, self.cluster, self.truth)
        cfg = self.config
        #: the mechanism with each model's own restart pause where its data sets one
        self._mech = cfg.mechanism.for_models(self.truth.restart_times())
        per_node = self.cluster.max_node_gpus
        jobs = [SimJob(spec, job_app(self.truth, spec, per_node)) for spec in workload.jobs]
        types = self.cluster.gpu_types
        self._mixed = self.cluster.is_mixed
        #: the GPU type of every placement when the cluster has one named type; None when
        #: it has several (each placement's, `_reassign`); "" without types
        self._one_type: str | None = None if len(types) > 1 else types[0]
        if self._one_type:  # one named type: every job runs on it throughout
            for job in jobs:
                job.retype(self._one_type)
        #: on a mixed cluster, per job: GPU-seconds per type so far, and (type, attained GPU-s)
        #: when its current placement began (`_account_type`)
        self._by_type: dict[int, dict[str, float]] = {}
        self._type_mark: dict[int, tuple[str, float]] = {}
        self._specs = {}  # the active jobs' specs, by name (JobSpec)
        self._restricted = any(spec.gpu_type is not None for spec in workload.jobs)
        self._type_aware = self.policy.promises.type_aware
        self._arrivals = arrivals = sorted(jobs, key=lambda j: j.spec.submit_time_s)
        self._next_arrival = 0
        self._active = []
        self._done = []
        self._done_views = []
        self._finished = []
        self._previous = Decision({})
        self._finish_heap = []
        self._predicted = {}
        first_submit = arrivals[0].spec.submit_time_s if arrivals else 0.0
        self._rounds = rounds = Rounds(self.policy, cfg.interval_s, first_submit,
                                       cfg.trust_promises)
        promises = rounds.promises
        skip_idle = promises.on_change_only
        on_arrival = Changes.ARRIVAL in promises.reacts_to
        on_completion = Changes.COMPLETION in promises.reacts_to
        self._predict = predict = skip_idle or on_completion
        self._handover = GpuHandover(self.cluster.gpus_per_node)
        self._held = [0] * self.cluster.num_nodes  # GPUs running jobs hold, per node
        self._used = 0  # ... and in all
        self._waiting = 0  # active jobs without GPUs
        limit = trace_horizon(workload.jobs, self.truth, self.cluster.max_node_gpus,
                              self._mech.start_s(), cfg.max_time_s, cfg.interval_s,
                              self.cluster.gpu_types or ("",))
        self._max_time_s = max_time = limit.limit_s
        active, done, finish_heap = self._active, self._done, self._finish_heap
        timeline: list[tuple[float, int]] = [(0.0, 0)]
        total = len(jobs)
        now = 0.0

        while len(done) < total:
            # when is the next point anything can happen?
            next_arrival = self._next_arrival
            t_arrival = arrivals[next_arrival].spec.submit_time_s if next_arrival < total else math.inf
            stop = rounds.next_round_s
            if on_arrival and t_arrival < stop:
                stop = t_arrival
            if on_completion and finish_heap and finish_heap[0][0] < stop:
                stop = finish_heap[0][0]
            now = stop = max(stop, now)
            if stop > max_time:
                break
            at_round = rounds.step(now, self)
            if self._used != timeline[-1][1]:
                timeline.append((now, self._used))
            if predict:
                self._refresh_predictions(finish_heap, self._predicted, now)
            if at_round and (skip_idle or not active):
                # jump over rounds where nothing can arrive or finish
                next_arrival = self._next_arrival
                if not active:
                    horizon = arrivals[next_arrival].spec.submit_time_s if next_arrival < total else math.inf
                else:
                    horizon = min(t_arrival if next_arrival < total else math.inf,
                                  finish_heap[0][0] if (finish_heap and predict) else math.inf)
                rounds.skip_to(horizon)
            if on_progress is not None and self._finished:
                on_progress(len(done) / total)

        result = SimResult(policy=self.policy.name, workload=workload.name,
                           cluster_gpus=self.cluster.total_gpus,
                           jobs=[self._record(j) for j in jobs], gpu_timeline=timeline,
                           rounds=rounds.count)
        if len(done) < total:
            result.stopped = limit.stop_note(total - len(done), total)
        if self._mixed:
            result.fast_gpu_share = fast_gpu_share(result.jobs, {
                j.spec.name: self._type_speeds(j) for j in jobs})
        result.wall_s = time.perf_counter() - started
        return result

    # -- the world a round sees (`corral.core.rounds.World`) ----------------------------------
    def take_finished(self, now_s: float) -> Changes:
        """Advance everyone who runs to `now_s` (a waiting job only counts its queueing time)
        and take out the jobs that finished, their GPUs handed back."""
        active = self._active
        finished = self._finished = []
        for job in active:
            job.advance(now_s)
            if job.finish_s is not None:
                finished.append(job)
        if not finished:
            return _NO_CHANGE
        for job in finished:  # exactly the active jobs that finished: out, in place
            active.remove(job)
        release_s = self._mech.overheads.release_s
        learns = self._rounds.promises.learns_from_completed
        for job in finished:
            if self._mixed:
                self._account_type(job)
            assert job.finish_s is not None
            self._handover.released(job.placement, job.finish_s + release_s)
            self._hold(job.placement, -1)
            job.release()
            self._done.append(job)
            if learns:
                self._done_views.append(completed_view(job.view()))
            job.shed_training()
            self._specs.pop(job.spec.name, None)
            self._predicted.pop(id(job), None)
            self.policy.job_left(job.spec.name)
        return _COMPLETION

    def take_arrivals(self, now_s: float) -> bool:
        """Take in the jobs submitted by `now_s`, each brought to it as it waited."""
        arrivals, i, total = self._arrivals, self._next_arrival, len(self._arrivals)
        if i >= total or arrivals[i].spec.submit_time_s > now_s:
            return False
        active = self._active
        while i < total and arrivals[i].spec.submit_time_s <= now_s:
            job = arrivals[i]
            i += 1
            job.clock_s = job.spec.submit_time_s
            job.advance(now_s)
            active.append(job)
            self._specs[job.spec.name] = job.spec
            job.active_at_arrival = len(active)
            self._waiting += 1
            if self._mixed:
                self._profile(job)
        self._next_arrival = i
        return True

    def _profile(self, job: SimJob) -> None:
        """Seed a newly arrived job's estimator with a one-GPU profile of each GPU type it may
        use (`one_gpu_profiles`; Sia (SOSP'23) §4: each new job is profiled on one GPU of every
        type, its per-(type, count) goodput bootstrapped from that and refined as it runs).
        Only on a cluster of several types (`self._mixed`), once per job; without it gavel and
        sia would take every type the job has not run on as fast as its current one
        (`policies/gpu_types.py`). The emulated executor seeds its jobs the same way."""
        job.estimator.bootstrap_missing(
            one_gpu_profiles(job.spec, job.app_truth, self.cluster))

    def none_waits(self) -> bool:
        return self._waiting == 0

    def decide(self, now_s: float) -> bool:
        """Ask the policy, check and apply its decision; predict the finishes it moved."""
        active = self._active
        if not active:
            return False
        decision = self.policy.decide(self._snapshot(now_s, active, self._done_views,
                                                     self._previous))
        decision = self._validate(decision, active)
        moved = self._apply(now_s, decision, active)
        self._previous = decision
        if self._waiting:  # why each job left without GPUs waits, until the next decision
            reasons = decision.reasons
            for job in active:
                if not job.placement.slots:
                    job.told(reasons.get(job.spec.name))
        if self._predict and moved:
            max_time, predicted, heap = self._max_time_s, self._predicted, self._finish_heap
            for job in moved:
                predicted[id(job)] = t = job.predict_finish_s(max_time)
                heapq.heappush(heap, (t, id(job), job))
        return True

    def keep(self, now_s: float, changed: bool) -> bool:
        """The last decision stands, or its answer is known (every job keeps what it runs)."""
        if not self._active:
            return False
        if changed and self.config.interference_slowdown > 0:
            self._apply_interference(self._active)  # as a decision would: a neighbour left
        return True

    # -- helpers ------------------------------------------------------------------------------
    def _refresh_predictions(self, heap: list, predicted: dict[int, float], now: float) -> None:
        """Drop stale or finished entries from the heap top; re-predict hints that came due."""
        while heap:
            t, key, job = heap[0]
            if predicted.get(key) != t or job.finish_s is not None:
                heapq.heappop(heap)
            elif t <= now:
                heapq.heappop(heap)
                if job.placement:
                    predicted[key] = t = max(job.predict_finish_s(self._max_time_s), now + 1e-6)
                    heapq.heappush(heap, (t, key, job))
            else:
                break

    def _snapshot(self, now: float, active: list[SimJob], done_views: list,
                  previous: Decision) -> Snapshot:
        promises = self._rounds.promises
        if promises.oracle:
            views = tuple([j.view(self._oracle(j)) for j in active])
        elif promises.placements_only:
            views = tuple([j.placement_view() for j in active])
        else:
            views = tuple([j.view() for j in active])
        return Snapshot(time_s=now, cluster=self.cluster, jobs=views, previous=previous,
                        completed=tuple(done_views))

    def _oracle(self, job: SimJob) -> OracleInfo:
        spec = job.spec
        per_node = self.cluster.max_node_gpus
        counts = packed_counts(spec.gpus, per_node)
        secs, steps = remaining_at(job.truth, counts, spec.user_batch(spec.gpus),
                                   job.total_epochs, job.epoch, job.progress)
        speed = user_step_times(job.truth, spec, per_node,
                                spec.max_user_gpus(self.cluster.total_gpus))
        return OracleInfo(remaining_steps_user=steps, remaining_s_user=secs, step_s_user=speed)

    def _validate(self, decision: Decision, active: list[SimJob]) -> Decision:
        """The decision to apply (`corral.core.deciding.checked_decision`): within one GPU type
        per job for a type-unaware policy on a mixed cluster, checked."""
        return checked_decision(decision, self.cluster, self._specs, self.policy.name,
                                self._type_aware, self._restricted)

    def _placement_type(self, new: Placement) -> str:
        """The GPU type of placement `new` (non-empty): the cluster's one type, or on a mixed
        cluster `new`'s (`checked_decision` keeps a job within one type)."""
        if self._one_type is not None:
            return self._one_type
        t = self.cluster.placement_type(new)
        assert t is not None, "checked_decision keeps a job within one type"
        return t

    def _type_speeds(self, job: SimJob) -> dict[str, float]:
        """The job's training speed (steps/s at its own GPU count and batch, packed) on each
        type it may run on, for `fast_gpu_share`."""
        spec = job.spec
        out = {}
        for t in self.cluster.types_for(spec):
            per_node = self.cluster.max_node_gpus_of_type(t)
            k = min(spec.gpus, self.cluster.gpus_of_type(t))
            b = spec.user_batch(k)
            step_s, sync_s = job.app_truth.for_type(t).step_time(packed_counts(k, per_node),
                                                               b.local_bsz)
            out[t] = 1.0 / (step_s + b.accum_steps * (step_s - sync_s))
        return out

    def _account_type(self, job: SimJob) -> None:
        """Book the GPU-seconds `job` held since its placement began to that placement's type."""
        key = id(job)
        mark = self._type_mark.pop(key, None)
        if mark is not None:
            spent = self._by_type.setdefault(key, {})
            spent[mark[0]] = spent.get(mark[0], 0.0) + job.attained_gpu_s - mark[1]
        if job.placement.slots and job.finish_s is None:
            t = self.cluster.placement_type(job.placement)
            self._type_mark[key] = (t if t is not None else "", job.attained_gpu_s)

    def _hold(self, placement: Placement, sign: int) -> None:
        """Count `placement`'s GPUs as held (+1) or given back (-1)."""
        for node, gpus in placement.slots:
            self._held[node] += sign * gpus
        self._used += sign * placement.num_gpus

    def _apply(self, now: float, decision: Decision, active: list[SimJob]) -> list[SimJob]:
        """Give every active job its assignment; returns the jobs whose placement or batch changed.

        Only jobs whose assignment differs from what they run are touched (`SimJob.keeps`);
        the GPU handover visits only the nodes they leave or join.
        """
        moved = self._reassign(now, decision, active)
        if self.config.interference_slowdown > 0:
            self._apply_interference(active)
        return moved

    def _reassign(self, now: float, decision: Decision, active: list[SimJob]) -> list[SimJob]:
        """The assignments that change, GPU handover included (see `_apply`)."""
        mech = self._mech
        get = decision.get
        touched = [(job, new) for job, new in [(j, get(j.spec.name)) for j in active]
                   if not job.keeps(new)]
        if not touched:
            return []
        pauses = self._handover.pauses(now, mech, [
            (job.spec.app, job.placement, new.placement if new else NO_PLACEMENT)
            for job, new in touched], self._held)
        moved = []
        mixed = self._mixed
        for (job, new), pause in zip(touched, pauses):
            before, held = job.batch, job.placement
            gpu_type = self._placement_type(new.placement) if new and new.placement else ""
            if mixed and new and new.placement != held:
                job.retype(gpu_type)  # a type change is a placement change: it pays the restart
            # its steps are observed as its placement's type's, as a live job reports them
            relaunch = mech.relaunches(job.spec.app, held, new.placement if new else NO_PLACEMENT)
            if job.assign(now, new, pause, gpu_type, relaunch) or job.batch != before:
                moved.append(job)
            if mixed and job.placement != held:
                self._account_type(job)
            if job.placement != held:
                self._hold(held, -1)
                self._hold(job.placement, +1)
                self._waiting += (not job.placement.slots) - (not held.slots)
                if mech.overheads.loses_progress and held:
                    job.restart_from_epoch()
        return moved

    def _apply_interference(self, active: list[SimJob]) -> None:
        """Slow down distributed jobs on nodes that host two or more distributed jobs.

        Re-judged at every decision, changed or not, among the jobs running then (the reference
        simulator's rule, every interval): a job whose neighbour has finished runs at full
        speed from the next decision on, even when no assignment changes.
        """
        per_node: dict[int, int] = {}
        for job in active:
            if job.placement.num_nodes > 1:
                for node, _ in job.placement.slots:
                    per_node[node] = per_node.get(node, 0) + 1
        for job in active:
            hit = job.placement.num_nodes > 1 and any(per_node[n] > 1 for n, _ in job.placement.slots)
            job.set_slowdown(self.config.interference_slowdown if hit else 0.0)

    def _record(self, job: SimJob) -> JobRecord:
        spec = job.spec
        by_type: dict[str, float] = {}
        if self._mixed:
            self._account_type(job)  # an unfinished job's last placement
            by_type = {t: gpu_s for t, gpu_s in self._by_type.get(id(job), {}).items() if gpu_s}
        isolated, fair = isolated_jcts(spec, job.app_truth, self.cluster, job.total_epochs,
                                       job.active_at_arrival)
        return JobRecord(
            name=spec.name, app=spec.app, submit_s=spec.submit_time_s, requested_gpus=spec.gpus,
            first_start_s=job.first_start_s, finish_s=job.finish_s, restarts=job.restarts,
            attained_gpu_s=job.attained_gpu_s, run_time_s=job.run_time_s,
            queue_time_s=job.queue_time_s, active_at_arrival=job.active_at_arrival,
            isolated_jct_s=isolated, fair_share_jct_s=fair, gpu_s_by_type=by_type,
            waited_by_reason=job.waited_by_reason)


def isolated_jcts(spec: JobSpec, truth: AppTruth, cluster: Cluster, total_epochs: int,
                  active_at_arrival: int) -> tuple[float, float]:
    """A job's JCT alone on the whole cluster and alone on a 1/N share of it (N: the jobs
    active when it arrived), each at its best configuration: the records' lower bound and
    finish-time fairness basis (also for runs of the live service, `corral emulate`). On a
    cluster of named GPU types (`truth` the job's type-less truth) a job runs on one type:
    each figure is the best over the types it may run on (its `gpu_type` only, when it names
    one), alone on that type's GPUs or on a 1/N share of them, at that type's speed
    (`AppTruth.for_type`) and packed on that type's nodes (`max_node_gpus_of_type`)."""
    fixed = None if spec.adaptive else spec.batch_size
    max_bsz = spec.max_bsz if spec.adaptive else spec.batch_size
    n = max(1, active_at_arrival)

    def alone(gpus: int, app: AppTruth, per_node: int) -> float:
        return best_isolated_jct(app, gpus, per_node, total_epochs, fixed,
                                 spec.max_local_bsz, spec.min_local_bsz, max_bsz)

    types = cluster.gpu_types
    if len(types) > 1 or (types and types[0]):
        pairs = []
        for t in cluster.types_for(spec):
            app, gpus, per_node = truth.for_type(t), cluster.gpus_of_type(t), \
                cluster.max_node_gpus_of_type(t)
            pairs.append((alone(gpus, app, per_node), alone(max(1, gpus // n), app, per_node)))
        return min(p[0] for p in pairs), min(p[1] for p in pairs)
    total, per_node = cluster.total_gpus, cluster.max_node_gpus
    return alone(total, truth, per_node), alone(max(1, total // n), truth, per_node)
