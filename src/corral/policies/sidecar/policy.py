"""`sidecar`: the Adaptive GPU Scheduler of the non-intrusive SideCar framework (SC'20), §III-C.

Each decision minimises the predicted makespan: Algorithm 1 (reshaping down) gives a job
without GPUs an allowed count from idle GPUs plus at most one running donor's; Algorithm 2
(reshaping up) gives idle GPUs to the one job and count that help most. Predictions:
`corral.perf.sidecar_time` (`overheads` profile, remaining iterations from `JobView.oracle`).
Decided here: ties by summed completions; Algorithm 1 before 2 on each arrival and completion;
2 only on strict gain (`guard`); one reshape per job per decision; counts `gpu_counts`; donors
give GPUs on their freest nodes; off-node growth costs `cross_host_s`; the user's batch stays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import Assignment, Decision, JobSpec, JobView, Snapshot
from corral.core.policy import Changes, Keeps, Policy, Promises, Reads, register_policy
from corral.core.reasons import waiting_reasons
from corral.perf.overheads import OVERHEADS, overheads_named
from corral.perf.sidecar_time import SidecarTimeModel
from corral.policies.placement import consolidated, free_gpus, take

__all__ = ["Sidecar", "SidecarParams", "SidecarPlan", "allowed_counts", "check_params",
           "grow_placement", "shrink_placement"]


@dataclass
class SidecarParams:
    overheads: str = "sidecar"  # overhead profile the predictions use (corral.perf.overheads)
    gpu_counts: str = "pow2"  # allowed GPU counts: "pow2" or a list such as "1,2,4"
    reshape_down: bool = True  # Algorithm 1 may take GPUs from a running job
    reshape_up: bool = True  # Algorithm 2 gives idle GPUs to running jobs
    guard: bool = True  # Algorithm 2 reshapes only when the prediction improves

    def __post_init__(self) -> None:
        check_params(self.overheads, self.gpu_counts)


def check_params(overheads: str, gpu_counts: str) -> None:
    """ValueError unless `overheads` names a profile and `gpu_counts` parses."""
    if overheads not in OVERHEADS:
        raise ValueError(f"overheads must be one of {', '.join(OVERHEADS)}, got {overheads!r}")
    parse_counts(gpu_counts)


def parse_counts(text: str) -> tuple[int, ...] | None:
    """None for "pow2", else the listed counts (ValueError on anything else)."""
    if text.strip().lower() == "pow2":
        return None
    try:
        counts = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise ValueError(f"gpu_counts must be 'pow2' or a list like '1,2,4', got {text!r}") from None
    if not counts or counts[0] < 1:
        raise ValueError(f"gpu_counts must list counts >= 1, got {text!r}")
    return counts


def allowed_counts(spec: JobSpec, cluster: Cluster, listed: tuple[int, ...] | None) -> tuple[int, ...]:
    """The GPU counts a job may run with (its "optional numbers of GPUs", Table III)."""
    top = min(spec.max_gpus, cluster.total_gpus)
    if listed is None:
        limit = max(spec.gpus, cluster.max_node_gpus)
        base = {1 << k for k in range(limit.bit_length()) if 1 << k <= limit} | {spec.gpus}
    else:
        base = set(listed)
    return tuple(sorted(n for n in base if spec.min_gpus <= n <= top)) or (min(spec.gpus, top),)


def shrink_placement(placement: Placement, by: int, free: list[int]) -> Placement:
    """`placement` less `by` GPUs, taken off the nodes with the most free GPUs first."""
    slots = dict(placement.slots)
    for node in sorted(slots, key=lambda n: (-free[n], n)):
        k = min(slots[node], by)
        slots[node] -= k
        by -= k
        if by == 0:
            break
    return Placement.of(slots)


def grow_placement(placement: Placement, by: int, free: list[int]) -> Placement | None:
    """`placement` plus `by` GPUs: on its own nodes first, then the freest others; or None."""
    if by > sum(free):
        return None
    slots = dict(placement.slots)
    own = sorted(slots, key=lambda n: (-free[n], n))
    others = sorted((n for n in range(len(free)) if n not in slots), key=lambda n: (-free[n], n))
    for node in own + others:
        k = min(free[node], by)
        if k:
            slots[node] = slots.get(node, 0) + k
            by -= k
        if by == 0:
            break
    return Placement.of(slots)


@dataclass
class SidecarPlan:
    """A decision being built: assignments, free GPUs, and each job's predicted time left."""

    assignments: dict[str, Assignment]
    free: list[int]
    left_s: dict[str, float]
    touched: set[str] = field(default_factory=set)
    _top: list[tuple[float, str]] = field(default_factory=list)
    _sum: float = 0.0

    def __post_init__(self) -> None:
        self._refresh()

    def _refresh(self) -> None:
        self._top = sorted(((v, n) for n, v in self.left_s.items()), reverse=True)[:3]
        self._sum = sum(self.left_s.values())

    def score(self, changes: dict[str, float]) -> tuple[float, float]:
        """(predicted makespan, sum of predicted completions) with `changes` applied."""
        rest = next((v for v, n in self._top if n not in changes), 0.0)
        total = self._sum + sum(v - self.left_s.get(n, 0.0) for n, v in changes.items())
        return max([rest, *changes.values()]), total

    def place(self, spec: JobSpec, placement: Placement, left_s: float) -> None:
        old = self.assignments.get(spec.name)
        if old is not None:
            for node, gpus in old.placement.slots:
                self.free[node] += gpus
        take(self.free, placement)
        self.assignments[spec.name] = Assignment.user_config(spec, placement)
        self.left_s[spec.name] = left_s
        self.touched.add(spec.name)
        self._refresh()


@register_policy
class Sidecar(Policy):
    name = "sidecar"
    summary = ("SideCar's adaptive GPU scheduler: reshape down for incoming jobs, up into idle "
               "GPUs, min predicted makespan")
    Params: ClassVar[type] = SidecarParams
    promises = Promises(reads=Reads.VIEWS | Reads.ORACLE,
                        reacts_to=Changes.ARRIVAL | Changes.COMPLETION | Changes.NODES,
                        keeps=Keeps.DECISION_UNTIL_CHANGE)

    def __init__(self, params: SidecarParams | None = None) -> None:
        super().__init__(params)
        self._listed = parse_counts(self.params.gpu_counts)
        self._model: SidecarTimeModel | None = None
        self._counts: dict[str, tuple[Cluster, tuple[int, ...]]] = {}

    def model(self, snapshot: Snapshot) -> SidecarTimeModel:
        """The time model, fed this snapshot's measurements."""
        if self._model is None:
            self._model = SidecarTimeModel(overheads_named(self.params.overheads),
                                           snapshot.cluster.max_node_gpus)
        self._model.update(snapshot)
        return self._model

    def counts(self, spec: JobSpec, cluster: Cluster) -> tuple[int, ...]:
        """The job's allowed GPU counts on `cluster` (cached per job while the cluster is the
        same: live, nodes may join or leave between rounds)."""
        got = self._counts.get(spec.name)
        if got is None or (got[0] is not cluster and got[0] != cluster):
            got = self._counts[spec.name] = (cluster, allowed_counts(spec, cluster, self._listed))
        return got[1]

    def job_left(self, name: str) -> None:
        """Forget the job's allowed counts and which of its measurements were pooled (the
        pooled measurements of its application stay)."""
        self._counts.pop(name, None)
        if self._model is not None:
            self._model.speeds.forget(name)

    def start_plan(self, snapshot: Snapshot, model: SidecarTimeModel) -> SidecarPlan:
        """Running jobs keep their GPUs; pending jobs have none."""
        running = {v.name: Assignment.user_config(v.spec, v.placement)
                   for v in snapshot.jobs if v.is_running and v.placement}
        left = {v.name: model.running_s(v, v.num_gpus) for v in snapshot.jobs if v.name in running}
        return SidecarPlan(running, free_gpus(snapshot.cluster, running), left)

    def decide(self, snapshot: Snapshot) -> Decision:
        model = self.model(snapshot)
        plan = self.start_plan(snapshot, model)
        views = {v.name: v for v in snapshot.jobs}
        for view in snapshot.jobs:
            if view.name not in plan.assignments:
                self.schedule_incoming(view, plan, views, snapshot.cluster, model)
        if self.params.reshape_up:
            while self.reshape_up(plan, views, snapshot.cluster, model):
                pass
        return Decision(plan.assignments, waiting_reasons(
            snapshot.jobs, plan.assignments, snapshot.cluster, self.name,
            "no allowed GPU count free, even with one running job shrunk for it",
            need=lambda v: (self.counts(v.spec, snapshot.cluster) or (1,))[0]))

    # -- Algorithm 1 ------------------------------------------------------------------------
    def schedule_incoming(self, view: JobView, plan: SidecarPlan, views: dict[str, JobView],
                          cluster: Cluster, model: SidecarTimeModel) -> bool:
        """Place a job without GPUs (reshaping one donor down if that is best); False: pending."""
        idle = sum(plan.free)
        best: tuple | None = None
        for n in self.counts(view.spec, cluster):
            new_s = model.new_job_s(view, n)
            if n <= idle:
                placement = consolidated(plan.free, n)
                if placement is not None:
                    key = plan.score({view.name: new_s})
                    if best is None or key < best[0]:
                        best = (key, placement, None)
                continue
            if not self.params.reshape_down:
                continue
            need = n - idle
            for name, a in plan.assignments.items():
                donor = views[name]
                cur = a.placement.num_gpus
                if name in plan.touched or cur - need not in self.counts(donor.spec, cluster):
                    continue
                kept = shrink_placement(a.placement, need, plan.free)
                freed = list(plan.free)
                for node, gpus in a.placement.slots:
                    freed[node] += gpus - dict(kept.slots).get(node, 0)
                placement = consolidated(freed, n)
                if placement is None:
                    continue
                key = plan.score({view.name: new_s, name: model.running_s(donor, cur - need)})
                if best is None or key < best[0]:
                    best = (key, placement, (donor, kept))
        if best is None:
            return False
        _, placement, donation = best
        if donation is not None:
            donor, kept = donation
            plan.place(donor.spec, kept, model.running_s(donor, kept.num_gpus))
        plan.place(view.spec, placement, model.new_job_s(view, placement.num_gpus))
        return True

    # -- Algorithm 2 ------------------------------------------------------------------------
    def reshape_up(self, plan: SidecarPlan, views: dict[str, JobView], cluster: Cluster,
                   model: SidecarTimeModel) -> bool:
        """Give idle GPUs to the one running job that lowers the predicted makespan most."""
        idle = sum(plan.free)
        if idle == 0:
            return False
        base = plan.score({})
        best: tuple | None = None
        for name, a in plan.assignments.items():
            if name in plan.touched:
                continue
            view, cur = views[name], a.placement.num_gpus
            for n in self.counts(view.spec, cluster):
                if not cur < n <= cur + idle:
                    continue
                placement = grow_placement(a.placement, n - cur, plan.free)
                if placement is None:
                    continue
                new_host = len(placement.slots) > len(a.placement.slots)
                left = model.running_s(view, n, new_host)
                key = plan.score({name: left})
                if best is None or key < best[0]:
                    best = (key, view, placement, left)
        if best is None or (self.params.guard and not best[0] < base):
            return False
        _, view, placement, left = best
        plan.place(view.spec, placement, left)
        return True
