"""What was submitted (JobSpec), what a policy may see of a job (JobView), and what it decides."""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol

from corral.core.cluster import NO_PLACEMENT, Cluster, Placement, gpu_type_key, gpu_type_problem
from corral.core.reasons import WaitReason


class LrRule(str, enum.Enum):
    """How a job scales its learning rate when its total batch size grows past M0."""

    ADASCALE = "adascale"
    SQRT = "sqrt"
    LINEAR = "linear"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A submitted job: the user's fixed configuration and the limits the scheduler must respect.

    `gpus` and `batch_size` are the user's own tuned configuration, used as-is by non-adaptive
    policies. `init_bsz` (M0) is the batch size the job's learning rate was tuned for; adaptive
    policies may grow the total batch up to `max_bsz` with per-GPU batches in
    `[min_local_bsz, max_local_bsz]` (larger per-GPU batches than `max_local_bsz` do not fit in
    memory and need gradient accumulation).
    """

    name: str
    submit_time_s: float
    app: str
    gpus: int
    batch_size: int
    init_bsz: int
    max_bsz: int
    min_local_bsz: int
    max_local_bsz: int
    min_gpus: int = 1
    max_gpus: int = 1 << 30
    adaptive: bool = True
    lr_rule: LrRule = LrRule.ADASCALE
    epochs: int | None = None  # epochs the job trains for, when the user states it
    #: Seconds the job ran in its source trace on `gpus` GPUs at `batch_size`, when a trace
    #: says (a duration-based job): the simulator scales its model's epochs to take that long.
    trace_duration_s: float | None = None
    #: On one GPU, a total batch above this many samples trains as at least two micro-batches
    #: (one accumulation step): AdaptDL, the system the Pollux measurements replay, needs two
    #: gradient samples per step to estimate gradient noise (the artifact's simulator.py and
    #: goodput.py apply it to fixed and chosen batches alike; perf.goodput does for chosen ones).
    #: None: no such rule (corral.train estimates noise from consecutive steps instead).
    one_gpu_split_bsz: int | None = None
    #: The GPU type the job may run on (`corral submit --gpu-type`; its key, `gpu_type_key`:
    #: matched whatever the case it was written in), or None for any type. A
    #: placement on another type is refused by check_decision (given the specs) and avoided by
    #: `corral.core.gpu_types.within_one_type`.
    gpu_type: str | None = None
    #: The queue (team) the job was submitted to (`corral.core.queues`); None: the default queue.
    queue: str | None = None

    def __post_init__(self) -> None:
        if self.gpu_type is not None:
            if problem := gpu_type_problem(self.gpu_type):
                raise ValueError(f"job {self.name}: {problem}")
            object.__setattr__(self, "gpu_type", gpu_type_key(self.gpu_type))
        if self.gpus < 1:
            raise ValueError(f"job {self.name}: gpus must be >= 1, got {self.gpus}")
        if self.batch_size < 1 or self.init_bsz < 1:
            raise ValueError(f"job {self.name}: batch sizes must be >= 1")
        if self.min_local_bsz > self.max_local_bsz:
            raise ValueError(f"job {self.name}: min_local_bsz > max_local_bsz")

    def accum_steps_for(self, num_gpus: int, total_bsz: int | None = None) -> int:
        """Fewest gradient-accumulation steps so that `total_bsz` over `num_gpus` fits per GPU."""
        total = self.batch_size if total_bsz is None else total_bsz
        return _accum_steps(total, num_gpus, self.max_local_bsz)

    def max_user_gpus(self, total_gpus: int) -> int:
        """Most GPUs the user's batch spreads over: each keeps >= `min_local_bsz` samples (the
        Pollux artifact's cap for its baselines), within `max_gpus` and `total_gpus`."""
        return max(1, min(total_gpus, self.max_gpus, self.batch_size // self.min_local_bsz))

    def user_batch(self, num_gpus: int) -> BatchConfig:
        """The user's fixed total batch over `num_gpus`, with accumulation when it does not fit
        (and, on one GPU above `one_gpu_split_bsz`, at least one accumulation step).

        The per-GPU batch is rounded up, but not past `max_bsz` in total (bert's 384 on 5 GPUs
        runs as 5 x 10 x 7 = 350, not 5 x 11 x 7 = 385: the Pollux artifact's cap, as in
        perf.goodput; its gradient statistics end at the largest validated batch).

        Remembered per distinct (batch_size, max_local_bsz, one_gpu_split_bsz, max_bsz,
        num_gpus), everything it depends on: gang policies ask it for every job every round."""
        return _user_batch(*self.user_batch_inputs, num_gpus)

    def one_gpu_local_bsz(self) -> int:
        """The per-GPU batch a one-GPU profile of the job is taken at: its first one (M0 within
        the per-GPU limits when adaptive, else the user's batch on one GPU)."""
        if self.adaptive:
            return max(self.min_local_bsz, min(self.init_bsz, self.max_local_bsz))
        return self.user_batch(1).local_bsz

    @property
    def user_batch_inputs(self) -> tuple[int, int, int | None, int]:
        """Every field `user_batch` reads: (batch_size, max_local_bsz, one_gpu_split_bsz,
        max_bsz); specs equal in these get equal user batches."""
        return self.batch_size, self.max_local_bsz, self.one_gpu_split_bsz, self.max_bsz


def _accum_steps(total_bsz: int, num_gpus: int, max_local_bsz: int) -> int:
    """Fewest accumulation steps so that `total_bsz` over `num_gpus` fits `max_local_bsz`."""
    per_gpu = total_bsz / max(num_gpus, 1)
    return max(0, math.ceil(per_gpu / max_local_bsz) - 1)


@functools.lru_cache(maxsize=4096, typed=True)
def _user_batch(batch_size: int, max_local_bsz: int, one_gpu_split_bsz: int | None,
                max_bsz: int, num_gpus: int) -> BatchConfig:
    """`JobSpec.user_batch` of a spec with these fields (BatchConfig is immutable: shared)."""
    s = _accum_steps(batch_size, num_gpus, max_local_bsz)
    if num_gpus == 1 and one_gpu_split_bsz is not None and batch_size > one_gpu_split_bsz:
        s = max(s, 1)
    micro = num_gpus * (s + 1)
    local = math.ceil(batch_size / micro)
    if batch_size <= max_bsz:
        local = min(local, max_bsz // micro)
    return BatchConfig(max(1, local), s)


@dataclass(frozen=True, slots=True)
class BatchConfig:
    """Per-GPU batch `local_bsz` (m) and extra accumulation micro-steps `accum_steps` (s)."""

    local_bsz: int
    accum_steps: int = 0

    def total(self, num_gpus: int) -> int:
        return num_gpus * self.local_bsz * (self.accum_steps + 1)


@dataclass(frozen=True, slots=True)
class Assignment:
    """What a job is given: a placement and, optionally, the batch configuration to train with.

    `batch=None` lets the job choose: an adaptive job's agent picks the goodput-optimal
    configuration for the placement; a non-adaptive job keeps the user's batch size.
    """

    placement: Placement
    batch: BatchConfig | None = None

    @classmethod
    def user_config(cls, spec: JobSpec, placement: Placement) -> Assignment:
        """Run at the user's fixed total batch size on `placement` (non-adaptive policies)."""
        return cls(placement, spec.user_batch(placement.num_gpus))

    @property
    def num_gpus(self) -> int:
        return self.placement.num_gpus


class JobStatus(str, enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


#: Two members as plain module constants for the hot paths: on Python 3.11 reading
#: `JobStatus.RUNNING` goes through the enum class's attribute lookup (350 ns against 100 ns
#: for a global, measured), and the simulator reads a status per active job per round.
STATUS_RUNNING, STATUS_PENDING = JobStatus.RUNNING, JobStatus.PENDING


@dataclass(frozen=True, slots=True)
class OracleInfo:
    """True remaining work; filled in only for policies named as oracles."""

    remaining_steps_user: float  # optimizer steps left at the user's batch size
    remaining_s_user: float  # seconds left running alone at the user's configuration
    #: True seconds per optimizer step at the user's batch on 1, 2, ... packed GPUs (entry k-1
    #: for k GPUs, up to `JobSpec.max_user_gpus`); empty where the source has no table.
    step_s_user: tuple[float, ...] = ()


MetricRecord = tuple[int, int, float]  # (steps, epoch, validation metric)


class MetricHistory(Sequence[MetricRecord]):
    """The first `count` records of a job's append-only metric list, read-only and not copied.

    A simulated job appends a record at every epoch and shows its history in every view, so a
    copy per view would grow with the history. The records shown never change: the list is
    only appended to, past `count`. Compares equal to any sequence of the same records."""

    __slots__ = ("_records", "_count")

    def __init__(self, records: list[MetricRecord], count: int) -> None:
        self._records = records
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self._records[:self._count][index])
        i = index + self._count if index < 0 else index
        if not 0 <= i < self._count:
            raise IndexError("metric history index out of range")
        return self._records[i]

    def __iter__(self) -> Iterator[MetricRecord]:
        return islice(self._records, self._count)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == self._count and tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to tuples, so not hashable as one

    def __repr__(self) -> str:
        return f"MetricHistory({tuple(self)!r})"


class FittedModels(Protocol):
    """What policies read of a job's fitted models (`JobView.estimator`).

    `corral.perf.estimator.JobEstimator` has this shape; core does not import it (layers). The
    fitted throughput model and goodput function are perf's objects, which core cannot name:
    they are typed Any here, and a policy (which may import perf) names their types.
    """

    @property
    def gpu_type(self) -> str: ...
    def gpu_types(self) -> tuple[str, ...]: ...
    def has_model(self, gpu_type: str | None = None) -> bool: ...
    def max_gpus(self, gpu_type: str | None = None) -> int: ...
    @property
    def max_gpus_observed(self) -> int: ...
    @property
    def num_configs(self) -> int: ...
    @property
    def has_observations(self) -> bool: ...
    @property
    def is_stale(self) -> bool: ...
    def profile(self, gpu_type: str | None = None
                ) -> Mapping[tuple[int, int, int], tuple[int, float, float]]: ...
    def throughput_params(self, gpu_type: str | None = None) -> Any: ...  # ThroughputParams | None
    def goodput_fn(self, gpu_type: str | None = None) -> Any: ...  # GoodputFunction | None
    def goodput(self, gpu_type: str, gpus: int, nodes: int
                ) -> tuple[float, BatchConfig | None] | None: ...


@dataclass(slots=True)
class JobView:
    """What a policy sees of one job now. Read-only by convention; rebuilt for every snapshot
    (the simulator shows a policy that reads only placements a job's earlier view again while
    its status and assignment are unchanged)."""

    spec: JobSpec
    status: JobStatus
    assignment: Assignment | None
    attained_gpu_s: float  # GPU-seconds held so far (restart pauses included)
    run_time_s: float  # seconds holding GPUs
    queue_time_s: float  # seconds active without GPUs
    restarts: int  # placement changes of a running job so far (plus crash retries)
    epoch: int  # completed epochs
    steps: int  # optimizer steps completed
    progress: float  # scale-invariant iterations (steps at M0) completed
    max_gpus_held: int
    first_start_s: float | None
    last_change_s: float | None  # when the job's placement last changed
    batch: BatchConfig | None  # batch configuration it is training with now
    estimator: FittedModels | None  # the job's own fitted models (throughput, noise, goodput)
    metrics: Sequence[MetricRecord] = ()  # (steps, epoch, validation metric) history, oldest first
    epochs_since_change: int = 0  # epochs completed since its last placement change
    oracle: OracleInfo | None = None
    #: When the job's worker set was last launched: its start, a resume, a checkpoint-restart
    #: resize; an in-place resize keeps its workers and this time (`last_change_s` moves). None:
    #: not told (a view made without it: `started_s` reads `last_change_s`).
    last_start_s: float | None = None
    #: Restarts that launched a new worker set: resumes, crash retries, resizes by
    #: checkpoint-restart (an in-place resize is one of `restarts`, not of these). What Pollux's
    #: re-allocation penalty counts: its delay δ is a restart's.
    relaunches: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def num_gpus(self) -> int:
        return self.assignment.num_gpus if self.assignment else 0

    @property
    def placement(self) -> Placement:
        return self.assignment.placement if self.assignment else NO_PLACEMENT

    @property
    def is_running(self) -> bool:
        return self.status is STATUS_RUNNING

    @property
    def started_s(self) -> float | None:
        """When the job last (re)started (`last_start_s`, else its last placement change, else
        its first start; None: it never ran): what `min_runtime_s` protects a job from."""
        for t in (self.last_start_s, self.last_change_s, self.first_start_s):
            if t is not None:
                return t
        return None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a policy is told in one round: time, cluster and the active jobs."""

    time_s: float
    cluster: Cluster
    jobs: tuple[JobView, ...]  # pending and running, in submission order
    previous: Decision
    completed: tuple[JobView, ...] = ()  # jobs finished so far (for predictors that learn)

    def job(self, name: str) -> JobView:
        for view in self.jobs:
            if view.name == name:
                return view
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class Decision:
    """`{job name: Assignment}`; a job absent, or with an empty placement, does not run.

    `reasons` says, per job the decision leaves without GPUs, why (`corral.core.reasons`):
    every policy gives one for each job it leaves waiting. `shrinks` says, per running job the
    decision gives fewer GPUs than it holds (and some), why, in the words of the policy (or
    layer) that shrank it, naming it (`corral.core.reasons.shrink_reasons`); the live
    service's `resized` event carries it. Neither is compared: two decisions that run the
    same jobs the same way are equal whatever they say of them."""

    assignments: Mapping[str, Assignment] = field(default_factory=dict)
    reasons: Mapping[str, WaitReason] = field(default_factory=dict, compare=False)
    shrinks: Mapping[str, str] = field(default_factory=dict, compare=False)

    def get(self, name: str) -> Assignment | None:
        a = self.assignments.get(name)
        return a if a is not None and a.placement.slots else None

    def used_gpus(self, num_nodes: int) -> list[int]:
        used = [0] * num_nodes
        for a in self.assignments.values():
            for node, gpus in a.placement.slots:
                used[node] += gpus
        return used


def check_decision(decision: Decision, active: Collection[str] | Mapping[str, JobSpec],
                   cluster: Cluster, policy: str, allow_mixed_types: bool = False) -> None:
    """Raise DecisionError (one line) when a decision names an inactive job, uses a node that
    does not exist, over-allocates a node, places a job over nodes of two GPU types (unless
    `allow_mixed_types`: the policy declares it may) or, where `active` maps each active job's
    name to its JobSpec, places a job with a `gpu_type` on GPUs of another type.

    The simulator and the live service both apply a decision only after this check. On a
    cluster of one GPU type, with `active` a set of names, it is the plain capacity walk.
    """
    from corral.core.errors import DecisionError

    num_nodes, caps = cluster.num_nodes, cluster.gpus_per_node
    check_mixed = cluster.is_mixed and not allow_mixed_types
    specs = active if isinstance(active, Mapping) else None
    used = [0] * num_nodes
    over = []  # nodes seen above capacity (counts only grow: they end above it too)
    for name, assignment in decision.assignments.items():
        if name not in active:
            raise DecisionError(f"policy {policy} assigned GPUs to unknown or finished job {name!r}")
        slots = assignment.placement.slots
        for node, gpus in slots:
            if not 0 <= node < num_nodes or gpus < 0:
                raise DecisionError(f"policy {policy} used node {node}, which does not exist")
            used[node] += gpus
            if used[node] > caps[node]:
                over.append(node)
        if not slots or not (check_mixed or specs is not None):
            continue
        placed = cluster.placement_type(assignment.placement)
        if placed is None and check_mixed:
            raise DecisionError(f"policy {policy} placed job {name!r} across GPU types "
                                f"{_types_of(cluster, slots)}; a job spans types only where "
                                "its policy allows it")
        wanted = specs[name].gpu_type if specs is not None else None
        if wanted is not None and placed != wanted:
            raise DecisionError(f"policy {policy} placed job {name!r} on {_types_of(cluster, slots)} "
                                f"GPUs, but it may run only on {wanted}")
    if over:  # the first such node in node order, as a walk over all nodes would find
        node = min(over)
        raise DecisionError(f"policy {policy} over-allocated node {cluster.nodes[node].name}: "
                            f"{used[node]} GPUs assigned, {caps[node]} available")


def _types_of(cluster: Cluster, slots: tuple[tuple[int, int], ...]) -> str:
    """The GPU types of `slots`' nodes, in the cluster's type order, as `k80 and v100`."""
    here = {cluster.node_types[node] for node, _ in slots}
    names = [t or "(unnamed)" for t in cluster.gpu_types if t in here]
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]
