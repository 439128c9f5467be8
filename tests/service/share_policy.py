"""`test-share`: an elastic test policy for the live-service tests, loaded with
`corral serve --policy-module`. Every active job gets an equal share of the slots (within its
min/max GPUs), earliest jobs first get the remainder; the batch is left to the job. Arrivals
and completions therefore resize running jobs, deterministically."""

from __future__ import annotations

from corral.core.jobs import Assignment, Decision, Snapshot
from corral.core.policy import Keeps, Policy, Promises, register_policy
from corral.policies.placement import consolidated, free_gpus, take


@register_policy
class Share(Policy):
    name = "test-share"
    summary = "equal share of the slots for every active job (tests only)"
    promises = Promises(keeps=Keeps.DECISION_UNTIL_CHANGE)

    def decide(self, snapshot: Snapshot) -> Decision:
        jobs = list(snapshot.jobs)
        total = snapshot.cluster.total_gpus
        share, extra = divmod(total, max(len(jobs), 1))
        out: dict[str, Assignment] = {}
        free = free_gpus(snapshot.cluster, {})
        for i, view in enumerate(jobs):
            want = min(view.spec.max_gpus, share + (1 if i < extra else 0))
            if want < view.spec.min_gpus:
                continue
            placement = consolidated(free, want)
            if placement is not None:
                take(free, placement)
                out[view.name] = Assignment(placement)
        return Decision(out)
