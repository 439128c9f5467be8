"""`sidecar-termination`: the termination-based baseline of the SideCar paper (SC'20 §V).

Optimus's scheme, reshaping up only: an incoming job gets its smallest allowed count while a
GPU is idle; idle GPUs then go to running jobs one step at a time, each a termination and
restart (run it on the `termination` mechanism for the paper's costs). Decided here: each step
goes to the job whose predicted completion (`corral.perf.sidecar_time`) falls most net of the
reshape overhead, gains only, one step per job per decision and none within `grow_s` of its
last change (gradual, as Fig. 10); pending jobs start in submission order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from corral.core.jobs import Decision, Snapshot
from corral.core.policy import Keeps, register_policy
from corral.core.reasons import waiting_reasons
from corral.policies.placement import consolidated
from corral.policies.sidecar.policy import Sidecar, check_params, grow_placement


@dataclass
class TerminationParams:
    overheads: str = "termination"  # overhead profile the predictions use
    gpu_counts: str = "pow2"  # allowed GPU counts: "pow2" or a list such as "1,2,4"

    def __post_init__(self) -> None:
        check_params(self.overheads, self.gpu_counts)


@register_policy
class SidecarTermination(Sidecar):
    name = "sidecar-termination"
    summary = "SideCar paper's termination baseline: one GPU per new job, then Optimus-style +1 steps up"
    Params = TerminationParams
    #: keeps stepping jobs up at every round: no decision stands until a change
    promises = dataclasses.replace(Sidecar.promises, keeps=Keeps.NOTHING)

    def decide(self, snapshot: Snapshot) -> Decision:
        model = self.model(snapshot)
        plan = self.start_plan(snapshot, model)
        cluster = snapshot.cluster
        for view in snapshot.jobs:
            if view.name in plan.assignments:
                continue
            placement = consolidated(plan.free, self.counts(view.spec, cluster)[0])
            if placement is not None:
                plan.place(view.spec, placement, model.new_job_s(view, placement.num_gpus))
        settle_s = model.overheads.grow_s
        views = {v.name: v for v in snapshot.jobs}
        while sum(plan.free) > 0:
            best = None
            for name, a in plan.assignments.items():
                view = views[name]
                changed = view.last_change_s
                if name in plan.touched or (changed is not None
                                            and snapshot.time_s - changed < settle_s):
                    continue
                cur = a.placement.num_gpus
                step = next((n for n in self.counts(view.spec, cluster) if n > cur), None)
                if step is None or step - cur > sum(plan.free):
                    continue
                placement = grow_placement(a.placement, step - cur, plan.free)
                assert placement is not None  # (step - cur GPUs are free)
                new_host = len(placement.slots) > len(a.placement.slots)
                left = model.running_s(view, step, new_host)
                gain = plan.left_s[name] - left
                if gain > 0 and (best is None or gain > best[0]):
                    best = (gain, view, placement, left)
            if best is None:
                break
            _, view, placement, left = best
            plan.place(view.spec, placement, left)
        return Decision(plan.assignments, waiting_reasons(
            snapshot.jobs, plan.assignments, cluster, self.name,
            "its first GPU count is not free; running jobs are never shrunk",
            need=lambda v: (self.counts(v.spec, cluster) or (1,))[0]))
