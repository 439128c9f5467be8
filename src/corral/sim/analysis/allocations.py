"""Which job held how many GPUs when: a recorder of a policy's decisions during a simulation.

The engine gives every active job exactly the placement the decision names (nothing, when the
decision leaves it out), so the decisions, taken at the times they were made, are the jobs'
allocations. `record_allocations(policy)` wraps the policy's `decide` on that one instance and
keeps, per job, only the changes: `[(time_s, gpus), ...]` (0: not running). A job holds its
last value until it finishes (`JobRecord.finish_s`). This lives beside the engine, not in it:
the report's allocation timeline is a view of the decisions, and the engine need not know.
"""

from __future__ import annotations

from collections.abc import Callable

from corral.core.jobs import Decision, Snapshot
from corral.core.policy import Policy

__all__ = ["Allocations", "record_allocations"]

#: {job name: [(time_s, gpus held from then on), ...]}, changes only, in time order.
Allocations = dict[str, list[tuple[float, int]]]


def record_allocations(policy: Policy) -> Allocations:
    """Start recording `policy`'s decisions into the returned (live) dict.

    Replaces `decide` on this instance only; the policy's answers are passed on unchanged.
    """
    book: Allocations = {}
    decide: Callable[[Snapshot], Decision] = policy.decide

    def recording(snapshot: Snapshot) -> Decision:
        decision = decide(snapshot)
        for view in snapshot.jobs:
            a = decision.get(view.name)
            gpus = a.placement.num_gpus if a is not None else 0
            history = book.setdefault(view.name, [])
            if (history[-1][1] if history else 0) != gpus:
                history.append((float(snapshot.time_s), gpus))
        return decision

    policy.decide = recording  # type: ignore[method-assign]
    return book
