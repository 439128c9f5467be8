"""The one step between a policy's decision and applying it, for the simulator and the live loop.

`checked_decision` is what both the simulator's engine and the live control loop call on every
decision a policy returns: on a cluster of several GPU types, a policy that is not type-aware
(no `Reads.GPU_TYPES` in its promises) has its decision re-placed so that each job's GPUs are
of one type (`within_one_type`); then every decision is checked (`check_decision`) against the
active jobs' specs, so a placement over two types, or on a type the job's `gpu_type` excludes,
is refused whoever made it. On one type this is the plain capacity check.
"""

from __future__ import annotations

from collections.abc import Mapping

from corral.core.cluster import Cluster
from corral.core.gpu_types import within_one_type
from corral.core.jobs import Decision, JobSpec, check_decision

__all__ = ["checked_decision"]


def checked_decision(decision: Decision, cluster: Cluster, specs: Mapping[str, JobSpec],
                     policy: str, type_aware: bool, restricted: bool = True) -> Decision:
    """The decision to apply: `decision` placed within one GPU type per job unless the policy
    is `type_aware`, then checked against `specs` (the active jobs by name); DecisionError
    (one line) when it cannot be applied.

    `restricted=False` says that no job of `specs` names a `gpu_type` (the simulator knows it
    once per run): on a cluster of one type the check then skips the per-job type look-up.
    Returns `decision` itself when nothing was moved.
    """
    if cluster.is_mixed:
        if not type_aware:
            decision = within_one_type(decision, cluster, specs)
        check_decision(decision, specs, cluster, policy)
    else:
        check_decision(decision, specs if restricted else specs.keys(), cluster, policy)
    return decision
