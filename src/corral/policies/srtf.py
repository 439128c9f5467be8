"""`srtf`: oracle shortest-remaining-time-first, preemptive, at the user's fixed configuration.

An oracle: it reads each job's true remaining time (alone, at the user's GPUs and batch size)
from `JobView.oracle`, which the engine fills in only for policies that read `Reads.ORACLE`.
At every round the shortest jobs that fit (by GPU count) run; a longer running job is
preempted when shorter ones need its GPUs. Admitted running jobs stay where they are.
"""

from __future__ import annotations

from corral.core.jobs import Assignment, Decision, JobView, Snapshot
from corral.core.policy import Keeps, Policy, Promises, Reads, register_policy
from corral.core.reasons import waiting_reasons
from corral.policies.placement import gang_allocate


@register_policy
class Srtf(Policy):
    name = "srtf"
    summary = "oracle shortest-remaining-time-first, preemptive, user's fixed configuration"
    #: all run when none waits: all fit, and admitted jobs stay put
    promises = Promises(reads=Reads.VIEWS | Reads.ORACLE,
                        keeps=Keeps.DECISION_UNTIL_CHANGE | Keeps.RUNNING_WHEN_NONE_WAITS)

    def decide(self, snapshot: Snapshot) -> Decision:
        def remaining(view: JobView) -> tuple[float, float]:
            if view.oracle is None:
                raise RuntimeError("srtf needs JobView.oracle; run it where oracle data exists")
            return (view.oracle.remaining_s_user, view.spec.submit_time_s)

        ordered = sorted(snapshot.jobs, key=remaining)
        out = gang_allocate(snapshot.cluster, ordered, lambda v: v.spec.gpus,
                            batch_of=lambda v, p: Assignment.user_config(v.spec, p).batch)
        return Decision(out, waiting_reasons(
            ordered, out, snapshot.cluster, self.name,
            lambda v, above: f"behind {above} by true remaining time" if above
            else "shortest remaining time"))
