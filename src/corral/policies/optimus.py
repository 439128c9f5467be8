"""`optimus` and `optimus-oracle`: Optimus's marginal-gain GPU allocation at the user's batch.

Optimus (EuroSys'18) §4.1, Eq. 9, Algorithm 1: each active job gets one GPU, then GPUs go one
at a time to the job whose remaining time Q_j x step_time_j(K) falls most, while gains are
positive; placement on the fewest nodes, split evenly (Theorem 1). Q_j: `optimus` fits the
validation curve (`corral.perf.convergence`); `optimus-oracle` reads the true remaining steps
(the Pollux paper's Optimus+Oracle). Step time: the oracle's, else the job's fitted all-reduce
model (`speed_model=allreduce`) or Optimus's PS model (`ps`, Eq. 4). Decided here: no pre-run
profiling, so growth is capped at `explore_factor` x the most GPUs run on; δ per `USER_DELTA`.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from corral.core.cluster import Placement
from corral.core.jobs import Decision, JobSpec, JobView, Snapshot
from corral.core.policy import Policy, Promises, Reads, register_policy
from corral.core.reasons import waiting_reasons
from corral.perf.convergence import ConvergencePrediction, predict_total_epochs
from corral.perf.ps_speed import fit_ps_speed
from corral.perf.throughput import ThroughputParams, iteration_time
from corral.policies.placement import gang_allocate

#: Relative convergence threshold δ per Pollux application: the δ at which the fit of the
#: whole validation curve stops at the application's epoch count (median over the validated
#: batch sizes of the Pollux artifact's profiles, from benchmarks/fidelity/optimus_convergence.py).
#: bert trains 2 epochs, too few to fit; it always uses the fallback.
USER_DELTA: dict[str, float] = {
    "cifar10": 4.6e-4, "deepspeech2": 6.1e-4, "imagenet": 1.3e-3, "ncf": 1.2e-2,
    "yolov3": 1.7e-3,
}

SPEED_MODELS = ("oracle", "allreduce", "ps")
MIN_PS_POINTS = 3


@dataclass
class OptimusOracleParams:
    #: oracle (true step times) | allreduce (fitted Pollux model) | ps (Optimus Eq. 4, p = w)
    speed_model: str = "oracle"
    explore_factor: float = 2.0  # fitted models: x the most GPUs the job has run on (0 = none)

    def __post_init__(self) -> None:
        if self.speed_model not in SPEED_MODELS:
            raise ValueError(f"speed_model must be one of {', '.join(SPEED_MODELS)}, got {self.speed_model!r}")
        if self.explore_factor < 0:
            raise ValueError(f"explore_factor must be >= 0, got {self.explore_factor}")


@dataclass
class OptimusParams(OptimusOracleParams):
    speed_model: str = "allreduce"  # allreduce | ps: a policy that is no oracle fits its speed
    delta: float = 1e-3  # relative convergence threshold of applications not in the table
    delta_by_app: str = ""  # app=δ,... overriding USER_DELTA
    delta_prime_factor: float = 3.0  # δ' = factor x δ (the paper's 3% vs 1%)
    overestimate: float = 1.05  # remaining time x this until δ' is reached
    fallback_epochs: int = 20  # remaining epochs guessed before 3 points can be fitted
    max_epochs: int = 250  # cap on predicted epochs

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.speed_model == "oracle":
            raise ValueError("speed_model=oracle needs the oracle policy (optimus-oracle)")
        if not self.delta > 0 or not self.delta_prime_factor >= 1 or self.overestimate < 1:
            raise ValueError("need delta > 0, delta_prime_factor >= 1 and overestimate >= 1")
        if self.fallback_epochs < 1 or self.max_epochs < 2:
            raise ValueError("need fallback_epochs >= 1 and max_epochs >= 2")
        self.deltas()

    def deltas(self) -> dict[str, float]:
        """δ per application: the table, with `delta_by_app` overrides."""
        out = dict(USER_DELTA)
        for item in (s.strip() for s in self.delta_by_app.split(",")):
            if not item:
                continue
            app, sep, value = item.partition("=")
            try:
                d = float(value)
            except ValueError:
                d = -1.0
            if not sep or not app.strip() or not d > 0:
                raise ValueError(f"delta_by_app: expected app=delta with delta > 0, got {item!r}")
            out[app.strip()] = d
        return out


# -- allocation (Algorithm 1, ALLOC) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobDemand:
    """One job as ALLOC sees it: remaining steps and step time per GPU count."""

    name: str
    remaining_steps: float
    step_s: np.ndarray | None  # step_s[k] = seconds per step on k GPUs (index 0 unused); None: unknown
    min_gpus: int = 1

    @property
    def max_gpus(self) -> int:
        return len(self.step_s) - 1 if self.step_s is not None else self.min_gpus

    def gain(self, gpus: int) -> float:
        """Remaining-time reduction from one more GPU: Q x (t(K) - t(K+1))."""
        if self.step_s is None or gpus + 1 > self.max_gpus:
            return 0.0
        return float(self.remaining_steps * (self.step_s[gpus] - self.step_s[gpus + 1]))


def marginal_gain_allocation(demands: Sequence[JobDemand], capacity: int) -> dict[str, int]:
    """GPUs per job: each its minimum in the given order while GPUs last, then one GPU at a
    time to the largest positive marginal gain (ties: the earlier job)."""
    alloc: dict[str, int] = {}
    heap: list[tuple[float, int]] = []
    for i, d in enumerate(demands):
        if d.min_gpus > capacity:
            alloc[d.name] = 0
            continue
        alloc[d.name] = d.min_gpus
        capacity -= d.min_gpus
        heapq.heappush(heap, (-d.gain(d.min_gpus), i))
    while capacity > 0 and heap:
        neg_gain, i = heapq.heappop(heap)
        if -neg_gain <= 0:
            break
        d = demands[i]
        alloc[d.name] += 1
        capacity -= 1
        heapq.heappush(heap, (-d.gain(alloc[d.name]), i))
    return alloc


# -- placement (Algorithm 1, PLACE) ---------------------------------------------------------


def fewest_nodes_even(free: list[int], num_gpus: int) -> Placement | None:
    """Theorem 1: the fewest nodes (most free first) that hold `num_gpus`, split as evenly as
    their free GPUs allow; None when the cluster has too few free GPUs."""
    if num_gpus <= 0 or num_gpus > sum(free):
        return None
    order = sorted(range(len(free)), key=lambda n: (-free[n], n))
    have = 0
    for k, node in enumerate(order, start=1):
        have += free[node]
        if have >= num_gpus:
            return _split_evenly(free, order[:k], num_gpus)
    return None  # pragma: no cover - unreachable: the sum check above


class EvenPlacer:
    """`fewest_nodes_even` for many jobs placed one after another on one free list, without
    sorting every node for every job (4,000 jobs on 4,000 nodes: 16 million key calls a round).

    Nodes are kept in buckets by free GPUs, each bucket in node order, so the Theorem 1 order
    (most free first, then node index) is read bucket by bucket and only the nodes a job takes
    are visited. The buckets follow the free list across calls: `gang_allocate` takes exactly
    the placement returned last (or nothing when None came back) before the next call; a
    different list, or one that moved otherwise, is re-read whole. Placements are identical to
    `fewest_nodes_even`'s (tests/policies/test_optimus.py compares them).
    """

    def __init__(self) -> None:
        self._free: list[int] | None = None
        self._seen: list[int] = []
        self._buckets: dict[int, list[int]] = {}
        self._total = 0
        self._last: Placement | None = None

    def _read(self, free: list[int]) -> None:
        self._free, self._seen = free, list(free)
        self._buckets = {}
        for n, g in enumerate(free):
            if g > 0:
                self._buckets.setdefault(g, []).append(n)
        self._total = sum(free)
        self._last = None

    def _move(self, node: int, old: int, new: int) -> None:
        if old > 0:
            bucket = self._buckets[old]
            del bucket[bisect.bisect_left(bucket, node)]
        if new > 0:
            bisect.insort(self._buckets.setdefault(new, []), node)
        self._seen[node] = new
        self._total += new - old

    def _follow(self, free: list[int]) -> None:
        """Bring the buckets up to date with `free` (see the class docstring)."""
        if free is not self._free or len(free) != len(self._seen):
            self._read(free)
            return
        if self._last is not None:
            for node, _ in self._last.slots:
                if free[node] != self._seen[node]:
                    self._move(node, self._seen[node], free[node])
            self._last = None
        if self._total != sum(free):  # changed some other way: start again
            self._read(free)

    def __call__(self, free: list[int], num_gpus: int) -> Placement | None:
        self._follow(free)
        if num_gpus <= 0 or num_gpus > self._total:
            return None
        chosen: list[int] = []
        have = 0
        for value in sorted(self._buckets, reverse=True):
            nodes = self._buckets[value]
            if not nodes:
                continue
            need = math.ceil((num_gpus - have) / value)
            if need <= len(nodes):
                chosen += nodes[:need]
                have += need * value
                break
            chosen += nodes
            have += len(nodes) * value
        placement = _split_evenly(free, chosen, num_gpus)
        self._last = placement
        return placement


def _split_evenly(free: list[int], nodes: list[int], num_gpus: int) -> Placement:
    """Theorem 1's split of `num_gpus` over `nodes`: fewest-free first, as evenly as they allow."""
    k = len(nodes)
    slots: dict[int, int] = {}
    left = num_gpus
    for j, n in enumerate(sorted(nodes, key=lambda n: (free[n], n))):
        give = min(free[n], math.ceil(left / (k - j)))
        slots[n] = give
        left -= give
    return Placement.of(slots)


class ModelStepTimes:
    """Step times at the user's batch on 1..K packed GPUs from a fitted throughput model,
    shared by jobs with equal inputs (read-only tables, index 0 unused = inf).

    A table depends only on the model, the node size, K and the user's batch fields, and fits are
    remembered by their inputs (`perf.throughput`), so jobs of one application usually share one.
    Bounded, least recently used out."""

    def __init__(self, capacity: int = 8192) -> None:
        self.capacity = capacity
        self._tables: OrderedDict[tuple, np.ndarray] = OrderedDict()

    def get(self, params: ThroughputParams, spec: JobSpec, max_gpus: int,
            per_node: int) -> np.ndarray:
        key = (params, per_node, max_gpus, spec.user_batch_inputs)
        table = self._tables.get(key)
        if table is not None:
            self._tables.move_to_end(key)
            return table
        ks = np.arange(1, max_gpus + 1)
        batches = [spec.user_batch(int(k)) for k in ks]
        times = iteration_time(params, np.ceil(ks / per_node), ks,
                               np.array([b.local_bsz for b in batches]),
                               np.array([b.accum_steps for b in batches]))
        table = np.concatenate(([np.inf], np.asarray(times, dtype=float)))
        table.flags.writeable = False
        self._tables[key] = table
        if len(self._tables) > self.capacity:
            self._tables.popitem(last=False)
        return table


# -- the policies ---------------------------------------------------------------------------


@register_policy
class OptimusOracle(Policy):
    name = "optimus-oracle"
    summary = "Optimus marginal-gain GPU allocation, true remaining steps, user's batch"
    Params = OptimusOracleParams
    promises = Promises(reads=Reads.VIEWS | Reads.ORACLE)

    def __init__(self, params: OptimusOracleParams | None = None) -> None:
        super().__init__(params)
        self._tables: dict[str, tuple[object, int, np.ndarray]] = {}
        self._model_tables = ModelStepTimes()

    def remaining_steps(self, view: JobView, snapshot: Snapshot) -> float:
        if view.oracle is None:
            raise RuntimeError(f"{self.name} needs JobView.oracle; run it where oracle data exists")
        return max(view.oracle.remaining_steps_user, 0.0)

    def decide(self, snapshot: Snapshot) -> Decision:
        total = snapshot.cluster.total_gpus
        per_node = snapshot.cluster.max_node_gpus
        active = {v.name for v in snapshot.jobs}
        for gone in [n for n in self._tables if n not in active]:
            del self._tables[gone]
        demands = [JobDemand(v.name, self.remaining_steps(v, snapshot),
                             self.step_times(v, self.max_gpus(v, total), per_node),
                             max(1, v.spec.min_gpus))
                   for v in snapshot.jobs]
        gpus = marginal_gain_allocation(demands, total)
        # PLACE: running jobs whose count is unchanged stay; the others go smallest first.
        ordered = sorted(snapshot.jobs, key=lambda v: (gpus[v.name], v.spec.submit_time_s, v.name))
        out = gang_allocate(snapshot.cluster, ordered, lambda v: gpus[v.name], place=EvenPlacer(),
                            batch_of=lambda v, p: v.spec.user_batch(p.num_gpus))
        return Decision(out, waiting_reasons(
            ordered, out, snapshot.cluster, self.name,
            lambda v, above: "given no GPU: each went where it cuts remaining time most"
            if not gpus[v.name] else f"its {gpus[v.name]} GPU(s) did not fit beside {above}",
            need=lambda v: gpus[v.name] or max(1, v.spec.min_gpus)))

    def max_gpus(self, view: JobView, total_gpus: int) -> int:
        spec = view.spec
        cap = spec.max_user_gpus(total_gpus)
        if self.params.speed_model == "oracle":  # knows every count's speed: nothing to explore
            return max(cap, max(1, spec.min_gpus))
        seen = view.estimator.max_gpus_observed if view.estimator is not None else 0
        if self.params.explore_factor > 0:
            cap = min(cap, max(1, int(self.params.explore_factor * seen)))
        return max(cap, max(1, spec.min_gpus))

    def step_times(self, view: JobView, max_gpus: int, per_node: int) -> np.ndarray | None:
        """Seconds per step at the user's batch on 1..max_gpus packed GPUs (index 0 unused);
        None when unknown (a fitted model before the job has run anywhere)."""
        if self.params.speed_model == "oracle":
            return self._oracle_step_times(view, max_gpus)
        est = view.estimator
        params = est.throughput_params() if est is not None else None
        if est is None or params is None:
            return None
        key = (params, est.num_configs)
        cached = self._tables.get(view.name)
        if cached is not None and cached[0] == key and cached[1] == max_gpus:
            return cached[2]
        ks = np.arange(1, max_gpus + 1)
        ps_table = self._ps_step_times(view, ks) if self.params.speed_model == "ps" else None
        if ps_table is not None:
            table = np.concatenate(([np.inf], np.asarray(ps_table, dtype=float)))
        else:
            table = self._model_tables.get(params, view.spec, max_gpus, per_node)
        self._tables[view.name] = (key, max_gpus, table)
        return table

    def _oracle_step_times(self, view: JobView, max_gpus: int) -> np.ndarray:
        """The true step times of `JobView.oracle` on 1..max_gpus GPUs (index 0 unused)."""
        known = view.oracle.step_s_user if view.oracle is not None else ()
        if len(known) < max_gpus:
            raise RuntimeError(f"{self.name}: speed_model=oracle needs JobView.oracle.step_s_user "
                               f"for 1..{max_gpus} GPUs of {view.name} (the simulator fills it)")
        cached = self._tables.get(view.name)
        if cached is None or cached[0] is not known or cached[1] != max_gpus:
            table = np.concatenate(([np.inf], np.asarray(known[:max_gpus], dtype=float)))
            self._tables[view.name] = cached = (known, max_gpus, table)
        return cached[2]

    def _ps_step_times(self, view: JobView, ks: np.ndarray) -> np.ndarray | None:
        """Optimus Eq. 4 (p = w = K) fitted to the optimizer-step times the job has run."""
        points: dict[int, float] = {}
        profile = view.estimator.profile() if view.estimator is not None else {}
        for (_, k, m), (_, step_s, sync_s) in profile.items():
            accum = max(round(view.spec.batch_size / (k * m)) - 1, 0)
            points[k] = step_s + accum * (step_s - sync_s)
        if len(points) < MIN_PS_POINTS:
            return None
        w = np.array(sorted(points), dtype=float)
        model = fit_ps_speed(w, w, 1.0 / np.array([points[int(k)] for k in w]),
                             global_bsz=float(view.spec.batch_size))
        return model.step_time(ks, ks)


@register_policy
class Optimus(OptimusOracle):
    name = "optimus"
    summary = "Optimus: online convergence fit + marginal-gain GPU allocation, user's batch"
    Params = OptimusParams
    #: no oracle; steps per epoch borrowed from a finished job of the model
    promises = Promises(reads=Reads.VIEWS | Reads.COMPLETED)

    def __init__(self, params: OptimusParams | None = None) -> None:
        super().__init__(params)
        self._deltas = self.params.deltas()
        self._predictions: dict[str, tuple[int, ConvergencePrediction]] = {}
        # this round's `borrowed_epoch_steps` by application (for jobs before their first epoch)
        self._epoch_steps: tuple[Snapshot, dict[str, tuple[float, int] | None]] | None = None

    def predict(self, view: JobView) -> ConvergencePrediction:
        """The job's convergence prediction, refitted only when a new epoch was measured."""
        n = len(view.metrics)
        cached = self._predictions.get(view.name)
        if cached is None or cached[0] != n:
            p = self.params
            delta = self._deltas.get(view.spec.app, p.delta)
            pred = predict_total_epochs([m for _, _, m in view.metrics], delta,
                                        delta_prime=p.delta_prime_factor * delta,
                                        max_epochs=p.max_epochs, fallback_epochs=p.fallback_epochs)
            self._predictions[view.name] = cached = (n, pred)
        return cached[1]

    def remaining_steps(self, view: JobView, snapshot: Snapshot) -> float:
        pred = self.predict(view)
        done = len(view.metrics)
        factor = self.params.overestimate if pred.before_prime(done) else 1.0
        return pred.remaining(done) * steps_per_epoch(view, snapshot, self._borrow) * factor

    def _borrow(self, snapshot: Snapshot, app: str) -> tuple[float, int] | None:
        """`borrowed_epoch_steps`, looked up once per application per round (snapshot)."""
        if self._epoch_steps is None or self._epoch_steps[0] is not snapshot:
            self._epoch_steps = (snapshot, {})
        table = self._epoch_steps[1]
        if app not in table:
            table[app] = borrowed_epoch_steps(snapshot, app)
        return table[app]

    def decide(self, snapshot: Snapshot) -> Decision:
        active = {v.name for v in snapshot.jobs}
        for gone in [n for n in self._predictions if n not in active]:
            del self._predictions[gone]
        try:
            return super().decide(snapshot)
        finally:
            self._epoch_steps = None  # holds the snapshot only during its round


def borrowed_epoch_steps(snapshot: Snapshot, app: str) -> tuple[float, int] | None:
    """(steps per epoch, batch size) of the first job of `app` with a measured epoch, active
    jobs before completed ones; None when there is none."""
    for other in (*snapshot.jobs, *snapshot.completed):
        if other.spec.app == app and other.metrics:
            steps, epoch, _ = other.metrics[-1]
            return steps / max(epoch, 1), other.spec.batch_size
    return None


def steps_per_epoch(view: JobView, snapshot: Snapshot,
                    borrow: Callable[[Snapshot, str], tuple[float, int] | None]
                    = borrowed_epoch_steps) -> float:
    """Optimizer steps per epoch at the job's batch: its own history, else another job of the
    same application scaled by batch size (`borrow`: a caller may remember its lookups), else
    the steps it has run so far (at least 1)."""
    if view.metrics:
        steps, epoch, _ = view.metrics[-1]
        return steps / max(epoch, 1)
    borrowed = borrow(snapshot, view.spec.app)
    if borrowed is not None:
        per_epoch, batch_size = borrowed
        return per_epoch * batch_size / view.spec.batch_size
    return max(float(view.steps), 1.0)
