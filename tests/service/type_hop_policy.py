"""`test-type-hop`: a test policy for the live GPU-type tests, loaded with `corral serve
--policy-module`. Each job gets one GPU of the cluster's first GPU type until it has reported a
step, then one of its last type: a job moves between types once, deterministically."""

from __future__ import annotations

from corral.core.cluster import Placement
from corral.core.jobs import Assignment, Decision, Snapshot
from corral.core.policy import Policy, register_policy


@register_policy
class TypeHop(Policy):
    name = "test-type-hop"
    summary = "one GPU of the first type until a job reports a step, then of the last (tests only)"

    def decide(self, snapshot: Snapshot) -> Decision:
        c = snapshot.cluster
        free = list(c.gpus_per_node)
        out: dict[str, Assignment] = {}
        for view in snapshot.jobs:
            wanted = c.gpu_types[-1] if view.steps >= 1 else c.gpu_types[0]
            node = next((n for n in c.nodes_of_type(wanted) if free[n] >= 1), None)
            if node is not None:
                free[node] -= 1
                out[view.name] = Assignment(Placement(((node, 1),)))
        return Decision(out)
