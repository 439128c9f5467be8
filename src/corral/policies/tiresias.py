"""`tiresias-las` and `tiresias-gittins`: Tiresias's Discretized 2D-LAS and 2D-Gittins.

Tiresias (NSDI'19) §3.2-3.3, Pseudocode 1-2: gang jobs at their users' GPU counts, durations
unknown. Attained service (GPU-s) demotes a job through K queues (default 2); each round walks
the queues from the top, runs every job that fits and preempts the rest. In a queue, 2D-LAS is
FIFO by first start (`fifo_key`), 2D-Gittins by Gittins index (FIFO in the last queue);
`promote_knob` (off by default) resets a job that waited long enough. Placement (§3.3): skewed
models (`MODEL_SKEW` > PACKLIMIT) consolidate, others fill the most fragmented nodes. Decided
here: decisions per round; service counts restart pauses; Gittins is LAS until a job completes.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import operator
from dataclasses import dataclass

from corral.core.cluster import Placement
from corral.core.jobs import STATUS_RUNNING, Assignment, Decision, JobView, Snapshot
from corral.core.policy import Keeps, Policy, Promises, Reads, register_policy
from corral.core.reasons import waiting_reasons
from corral.perf.gittins import ServiceDistribution, load_service_distribution
from corral.policies.placement import Placer, consolidated, gang_allocate

#: Largest tensor / model size of the Tiresias reference simulator's models (its `models.py`
#: tensor lists); GoogLeNet falls back to Inception-v3 there too.
MODEL_SKEW: dict[str, float] = {
    "vgg19": 0.72, "vgg16": 0.74, "vgg11": 0.77, "alexnet": 0.61,
    "resnet152": 0.06, "resnet101": 0.08, "resnet50": 0.11,
    "inception4": 0.04, "inception3": 0.14, "googlenet": 0.14,
}

PLACEMENTS = ("skew", "consolidate", "spread")
#: A decision stands until this long before the first predicted crossing of a queue bound: the
#: service a job has attained is a sum of floating-point terms, so the round nearest the exact
#: crossing always asks the policy, which then reads the service itself.
STANDING_MARGIN_S = 1.0
_KEY = operator.itemgetter(0)  # a (sort key, view, service) entry's key
FIFO_KEYS = ("start", "arrival")


@dataclass
class TiresiasParams:
    queues: int = 2  # K priority queues
    #: Demotion thresholds in GPU-hours, comma-separated, one per queue boundary; a single
    #: value with K > 2 doubles per further queue (1 -> 1,2,4 h: the paper's multi-queue runs).
    threshold_gpu_h: str = "1"
    promote_knob: float = math.inf  # PROMOTEKNOB; inf (or 0) disables promotion
    placement: str = "skew"  # skew | consolidate | spread
    packlimit: float = 0.5  # skew above which a job is consolidated
    fifo_key: str = "start"  # start | arrival

    def __post_init__(self) -> None:
        if self.queues < 1:
            raise ValueError(f"queues must be >= 1, got {self.queues}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}")
        if self.fifo_key not in FIFO_KEYS:
            raise ValueError(f"fifo_key must be one of {', '.join(FIFO_KEYS)}, got {self.fifo_key!r}")
        if not self.promote_knob >= 0:
            raise ValueError(f"promote_knob must be >= 0 (inf = off), got {self.promote_knob}")
        self.thresholds_gpu_s()  # validate

    def thresholds_gpu_s(self) -> tuple[float, ...]:
        """Upper service bound of each queue but the last, in GPU-seconds."""
        try:
            hours = [float(h) for h in str(self.threshold_gpu_h).split(",") if h.strip()]
        except ValueError:
            raise ValueError(f"threshold_gpu_h must be numbers, got {self.threshold_gpu_h!r}") from None
        need = self.queues - 1
        if need == 0:
            return ()
        if len(hours) == 1:
            hours = [hours[0] * 2 ** i for i in range(need)]
        if len(hours) != need or any(not h > 0 for h in hours) or hours != sorted(hours):
            raise ValueError(f"threshold_gpu_h needs {need} increasing positive value(s) for "
                             f"{self.queues} queues (or one), got {self.threshold_gpu_h!r}")
        return tuple(h * 3600.0 for h in hours)

    @property
    def promotion(self) -> bool:
        return 0 < self.promote_knob < math.inf


@dataclass
class TiresiasGittinsParams(TiresiasParams):
    #: GPU-time samples (one-column CSV of GPU-seconds); empty: learn from completed jobs.
    distribution: str = ""


@dataclass(slots=True)
class _JobState:
    """What the scheduler remembers of a job between rounds (its reset points)."""

    gpu_base_s: float = 0.0  # attained GPU-seconds at the last promotion
    run_base_s: float = 0.0  # run time at the last promotion
    wait_base_s: float = 0.0  # queue time when last seen running or promoted
    promoted_s: float | None = None  # time of the last promotion


def spread_fill(free: list[int], num_gpus: int) -> Placement | None:
    """Place `num_gpus` on any free GPUs, the nodes with the fewest free GPUs first (keeps
    whole nodes free for jobs that must consolidate), or None when they do not fit."""
    if num_gpus <= 0 or num_gpus > sum(free):
        return None
    slots: dict[int, int] = {}
    left = num_gpus
    # nodes in (free, node) order: each free count's nodes in index order (C-level list.index)
    for g in sorted(g for g in set(free) if g > 0):
        n = -1
        while left:
            try:
                n = free.index(g, n + 1)
            except ValueError:
                break
            k = min(g, left)
            slots[n] = k
            left -= k
        if left == 0:
            break
    return Placement.of(slots)


@register_policy
class TiresiasLas(Policy):
    name = "tiresias-las"
    summary = "Tiresias discretized 2D-LAS: GPU-time priority queues, gang, preemptive"
    Params = TiresiasParams

    #: Jobs inside one queue are ordered by more than FIFO (Gittins), so a job can starve in Q1.
    ranks_within_queue = False
    #: What orders the jobs, as a waiting job's reason says it.
    ranking = "attained service"
    #: Admission by the user's GPU count, and a running admitted job stays where it is: when
    #: none waits, all are admitted again as they run (queues and promotion only order them).
    promises = Promises(keeps=Keeps.RUNNING_WHEN_NONE_WAITS)

    def __init__(self, params: TiresiasParams | None = None) -> None:
        super().__init__(params)
        self._thresholds = self.params.thresholds_gpu_s()
        self._state: dict[str, _JobState] = {}
        self._stands_until = -math.inf

    # -- priorities -------------------------------------------------------------------------
    def queue_of(self, attained_gpu_s: float) -> int:
        """Index of the queue (0 = highest) a job with this attained service belongs to: the
        first whose upper bound is above it, i.e. how many bounds (sorted) are at or below it."""
        return bisect.bisect_right(self._thresholds, attained_gpu_s)

    def _update(self, view: JobView, now_s: float,
                promotion: bool) -> tuple[int, float, _JobState]:
        """Refresh a job's state (promotion included when `promotion`, the parameters'
        `promotion`, read once a round); returns (queue, attained, state)."""
        name, running = view.spec.name, view.status is STATUS_RUNNING  # not via properties
        st = self._state.get(name)
        if st is None:
            st = self._state[name] = _JobState(wait_base_s=view.queue_time_s)
        if running:
            st.wait_base_s = view.queue_time_s
        attained = view.attained_gpu_s - st.gpu_base_s
        queue = self.queue_of(attained)
        ran_s = view.run_time_s - st.run_base_s
        if (promotion and not running and ran_s > 0
                and (queue > 0 or self.ranks_within_queue)
                and view.queue_time_s - st.wait_base_s >= self.params.promote_knob * ran_s):
            st.gpu_base_s, st.run_base_s = view.attained_gpu_s, view.run_time_s
            st.wait_base_s, st.promoted_s = view.queue_time_s, now_s
            attained, queue = 0.0, 0
        return queue, attained, st

    def _fifo(self, view: JobView, st: _JobState) -> tuple:
        if self.params.fifo_key == "arrival":
            entered = st.promoted_s if st.promoted_s is not None else view.spec.submit_time_s
            return (entered, view.spec.submit_time_s, view.name)
        started = st.promoted_s if st.promoted_s is not None else view.first_start_s
        if started is None:
            return (1, view.spec.submit_time_s, 0.0, view.name)
        return (0, started, view.spec.submit_time_s, view.name)

    def _within_queue(self, queue: int, attained: float, snapshot: Snapshot) -> float:
        """Extra sort key inside a queue before FIFO (none for LAS)."""
        return 0.0

    def _prepare(self, snapshot: Snapshot) -> None:
        """Per-round preparation hook (Gittins refreshes its distribution)."""

    # -- the round --------------------------------------------------------------------------
    def decide(self, snapshot: Snapshot) -> Decision:
        self._stands_until = -math.inf  # until this round's decision is made
        for gone in self._state.keys() - {v.spec.name for v in snapshot.jobs}:
            del self._state[gone]
        self._prepare(snapshot)
        keyed = []
        promotion = self.params.promotion
        for view in snapshot.jobs:
            queue, attained, st = self._update(view, snapshot.time_s, promotion)
            keyed.append(((queue, self._within_queue(queue, attained, snapshot),
                           self._fifo(view, st)), view, attained))
        keyed.sort(key=_KEY)
        ordered = [v for _, v, _ in keyed]
        out = self._allocate(snapshot, ordered)
        self._stands_until = self._standing(snapshot.time_s, keyed, out)
        queue_of = {v.spec.name: key[0] for key, v, _ in keyed}
        ranking = self.ranking

        def why(view: JobView, above: str) -> str:
            where = f"queue {queue_of[view.spec.name]} by {ranking}"
            return f"{where}, behind {above}" if above else where
        return Decision(out, waiting_reasons(ordered, out, snapshot.cluster, self.name, why))

    def stands_until(self) -> float:
        return self._stands_until

    def _standing(self, now_s: float, keyed: list, out: dict[str, Assignment]) -> float:
        """Until when this decision stands (`Policy.stands_until`) under 2D-LAS without promotion:
        until a running job's service may cross its queue's bound; -inf (every round) with promotion
        or under Gittins, whose inputs move continuously.

        A job's first start also moves its FIFO key, but only ahead of never-started jobs of its
        queue, all of them admitted: a greedy admission by GPU count then admits the same jobs on
        the same placements (tests/policies/test_tiresias.py checks this at every round)."""
        if self.ranks_within_queue or self.params.promotion:
            return -math.inf
        bounds = self._thresholds
        until = math.inf
        for (queue, _, _), view, attained in keyed:
            if queue < len(bounds):
                runs = out.get(view.spec.name)
                if runs is not None and runs.placement.slots:  # a waiting job's service stands
                    crossing = now_s + (bounds[queue] - attained) / runs.placement.num_gpus
                    until = min(until, crossing - STANDING_MARGIN_S)
        return until

    def _allocate(self, snapshot: Snapshot, ordered: list[JobView]) -> dict[str, Assignment]:
        """Admit by GPU count in priority order (skipping jobs that do not fit), keep admitted
        running jobs where they are, place the others."""
        return gang_allocate(snapshot.cluster, ordered, lambda v: v.spec.gpus,
                             place_of=self._placer,
                             batch_of=lambda v, p: v.spec.user_batch(p.num_gpus))

    def _placer(self, view: JobView) -> Placer:
        """Consolidate a skewed model (or every job with `placement=consolidate`), else fill
        fragments."""
        mode = self.params.placement
        if mode == "consolidate" or (mode == "skew" and self.skewed(view.spec.app)):
            return consolidated
        return spread_fill

    def skewed(self, app: str) -> bool:
        """Whether a model's tensor skew exceeds PACKLIMIT (consolidate it)."""
        return MODEL_SKEW.get(app.lower(), 0.0) > self.params.packlimit


@register_policy
class TiresiasGittins(TiresiasLas):
    name = "tiresias-gittins"
    summary = "Tiresias discretized 2D-Gittins: Gittins index from a GPU-time distribution"
    Params = TiresiasGittinsParams
    ranks_within_queue = True
    ranking = "attained service, then Gittins index"
    #: the GPU-time distribution is learned from finished jobs when none is given
    promises = Promises(reads=Reads.VIEWS | Reads.COMPLETED, keeps=Keeps.RUNNING_WHEN_NONE_WAITS)

    def __init__(self, params: TiresiasGittinsParams | None = None) -> None:
        super().__init__(params)
        path = self.params.distribution
        self._fixed = load_service_distribution(path) if path else None
        self._dist: ServiceDistribution | None = self._fixed
        self._learned_from = 0
        if self._fixed is not None:
            self.promises = dataclasses.replace(self.promises, reads=Reads.VIEWS)

    def _prepare(self, snapshot: Snapshot) -> None:
        if self._fixed is None and len(snapshot.completed) != self._learned_from:
            self._learned_from = len(snapshot.completed)
            self._dist = ServiceDistribution([v.attained_gpu_s for v in snapshot.completed])

    def _within_queue(self, queue: int, attained: float, snapshot: Snapshot) -> float:
        if self._dist is None or queue >= len(self._thresholds):
            return 0.0  # no distribution yet, or the last queue: FIFO
        quantum = self._thresholds[queue] - attained
        return -self._dist.gittins_index(attained, quantum)
