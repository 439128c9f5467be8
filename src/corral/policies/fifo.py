"""`fifo`: YARN-CS-like first-come-first-served gang scheduling (the Tiresias paper's baseline).

Each job runs on exactly the GPUs its user asked for, at the user's batch size (with gradient
accumulation when the per-GPU batch would not fit in memory, which the job does by itself).
Jobs start in submission order, consolidated on as few nodes as possible, and are never
preempted. By default the queue has head-of-line blocking, as YARN-CS does (Tiresias §5.1);
`backfill=true` lets later jobs that fit jump ahead (the paper's "best-effort" variant).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.core.jobs import STATUS_RUNNING, Assignment, Decision, JobView, Snapshot
from corral.core.policy import Keeps, Policy, Promises, Reads, register_policy
from corral.core.reasons import waiting_reasons
from corral.policies.placement import consolidated, free_gpus, take


@dataclass
class FifoParams:
    backfill: bool = False  # start later jobs that fit while the head of the queue waits


@register_policy
class Fifo(Policy):
    name = "fifo"
    summary = "first come first served, gang-scheduled on the user's GPUs, no preemption"
    Params = FifoParams
    #: submission order, GPU counts and who runs where; never preempts, admits by GPU count
    promises = Promises(reads=Reads.PLACEMENTS,
                        keeps=Keeps.DECISION_UNTIL_CHANGE | Keeps.RUNNING_WHEN_NONE_WAITS)

    def decide(self, snapshot: Snapshot) -> Decision:
        # one pass over the views, reading attributes, not properties: every active job, every
        # round; running jobs keep what they run, the others queue in submission order
        out: dict[str, Assignment] = {}
        queue = []
        for v in snapshot.jobs:
            if v.assignment is not None and v.status is STATUS_RUNNING:
                out[v.spec.name] = v.assignment
            else:
                queue.append(v)
        free = free_gpus(snapshot.cluster, out)
        for view in queue:
            placement = consolidated(free, view.spec.gpus)
            if placement is None:
                if self.params.backfill:
                    continue
                break
            take(free, placement)
            out[view.name] = Assignment.user_config(view.spec, placement)
        return Decision(out, waiting_reasons(snapshot.jobs, out, snapshot.cluster, self.name,
                                             _behind))


def _behind(view: JobView, above: str) -> str:
    """Why fifo leaves a job waiting: its place in arrival order."""
    return f"behind {above} in arrival order" if above else "first in arrival order"
