"""Why a job waits, in one typed reason (`WaitReason`), and the helper policies make them with.

A policy says why it leaves a job without GPUs in `Decision.reasons` (`{job name:
WaitReason}`); the round loop adds its own where it moves a decision (a job no one GPU type
has room for), and the team-queue layer where a queue's quota or another job's `min_runtime_s`
holds the GPUs. The simulator sums each job's waiting time by reason kind (`jobs.csv`); the
live service shows the reason (`corral jobs`, `describe`, `GET /jobs/ID`, the dashboard,
`/metrics` per kind), as the Kubernetes scheduler's `Status` and Kueue's `NoFitReason` do.

A policy that shrinks a running job (an elastic one: pollux, sia) says why in
`Decision.shrinks` (`shrink_reasons`); the live service's `resized` event carries it.

A reason's text is shown to the job's own team: it may name jobs of the job's own queue, and
says "another queue" for anything of another team's.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: jobs.py imports this module
    from corral.core.cluster import Cluster
    from corral.core.jobs import Assignment, JobView

__all__ = ["WaitKind", "WaitReason", "ARRIVING", "UNEXPLAINED", "free_by_type",
           "waiting_reasons", "no_type_room", "shrink_reasons"]


class WaitKind(str, enum.Enum):
    """What keeps a job from GPUs (one label value of `/metrics`, one `jobs.csv` column)."""

    ARRIVING = "arriving"  # arrived since the policy was last asked
    RANKED_LOWER = "ranked_lower"  # the policy gave the GPUs to jobs it ranks above this one
    NO_FIT = "no_fit"  # enough GPUs are free, but not in one block the job can use
    TYPE_UNAVAILABLE = "type_unavailable"  # the GPU type it names has too few free
    QUOTA = "quota"  # its queue holds its share, and nothing is idle to borrow
    PROTECTED = "protected"  # the GPUs are held by a job under `min_runtime_s`
    UNEXPLAINED = "unexplained"  # the policy gave no reason (a defect: every policy gives one)


@dataclass(frozen=True, slots=True)
class WaitReason:
    """One reason a job waits: its `kind`, a one-line `text` for people (it names the policy
    or layer that gave it) and, under queues, the `queue` it concerns."""

    kind: WaitKind
    text: str
    queue: str | None = None

    def to_doc(self) -> dict[str, Any]:
        """As plain values, for a JSON store or an API answer."""
        return {"kind": self.kind.value, "text": self.text, "queue": self.queue}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> WaitReason:
        """The reason `to_doc` wrote (an unknown kind reads as UNEXPLAINED)."""
        try:
            kind = WaitKind(doc.get("kind"))
        except ValueError:
            kind = WaitKind.UNEXPLAINED
        queue = doc.get("queue")
        return cls(kind, str(doc.get("text", "")), queue if isinstance(queue, str) else None)


#: A job the policy has not been asked about yet.
ARRIVING = WaitReason(WaitKind.ARRIVING, "arrived; the policy has not decided since")
#: A job left waiting without a reason from its policy.
UNEXPLAINED = WaitReason(WaitKind.UNEXPLAINED, "the policy gave no reason")


def free_by_type(cluster: Cluster, assignments: Mapping[str, Assignment]) -> dict[str, int]:
    """GPUs left free on each GPU type ("" on a cluster without types) after `assignments`."""
    types = cluster.node_types
    free: dict[str, int] = dict.fromkeys(cluster.gpu_types or ("",), 0)
    per_node = list(cluster.gpus_per_node)
    for a in assignments.values():
        for node, gpus in a.placement.slots:
            per_node[node] -= gpus
    for node, gpus in enumerate(per_node):
        t = types[node] if types else ""
        free[t] = free.get(t, 0) + max(0, gpus)
    return free


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def no_type_room(source: str, need: int, wanted: str | None,
                 free: Mapping[str, int]) -> WaitReason | None:
    """Why a job needing `need` GPUs of one type (of `wanted`, when it names one) cannot have
    them with `free` GPUs per type, or None when some type it may use has them free:
    TYPE_UNAVAILABLE for a named type, else NO_FIT when enough are free over several types."""
    if wanted is not None:
        have = free.get(wanted, 0)
        if have >= need:
            return None
        if wanted not in free:
            return WaitReason(WaitKind.TYPE_UNAVAILABLE,
                              f"{source}: gpu_type {wanted} named; the cluster has none")
        if have == 0:
            return WaitReason(WaitKind.TYPE_UNAVAILABLE, f"{source}: gpu_type {wanted} named; "
                              "none free")
        return WaitReason(WaitKind.TYPE_UNAVAILABLE, f"{source}: gpu_type {wanted} named; "
                          f"needs {need}, {have} free")
    best_type, best = max(free.items(), key=lambda item: (item[1], item[0]), default=("", 0))
    if best >= need or sum(free.values()) < need:
        return None
    return WaitReason(WaitKind.NO_FIT, f"{source}: needs {_gpus(need)} of one type; the "
                      f"largest free block is {best} ({best_type})")


def waiting_reasons(ordered: Sequence[JobView], decided: Mapping[str, Assignment],
                    cluster: Cluster, policy: str, why: str | Callable[[JobView, str], str],
                    need: Callable[[JobView], int] | None = None) -> dict[str, WaitReason]:
    """A reason for every job of `ordered` (the policy's priority order, highest first) that
    `decided` leaves without GPUs: TYPE_UNAVAILABLE or NO_FIT where the GPUs free after the
    decision could not hold it on one type (`no_type_room`), else RANKED_LOWER with the
    policy's own `why` (a text, or a function of the job and the name of the job just above it
    in `ordered`, "" for the first) and the GPUs it needs (`need`, the user's count by default)
    beside those free. One pass; the free GPUs are counted once."""
    out: dict[str, WaitReason] = {}
    free: dict[str, int] | None = None
    above = ""
    for view in ordered:
        name = view.spec.name
        a = decided.get(name)
        if a is None or not a.placement.slots:
            if free is None:
                free = free_by_type(cluster, decided)
            k = need(view) if need is not None else view.spec.gpus
            reason = no_type_room(policy, k, view.spec.gpu_type, free) if cluster.is_mixed \
                or view.spec.gpu_type is not None else None
            if reason is None:
                text = why if isinstance(why, str) else why(view, above)
                have = sum(free.values()) if view.spec.gpu_type is None \
                    else free.get(view.spec.gpu_type, 0)
                reason = WaitReason(WaitKind.RANKED_LOWER,
                                    f"{policy}: {text}; needs {_gpus(k)}, {have} free")
            out[name] = reason
        above = name
    return out


def shrink_reasons(jobs: Sequence[JobView], decided: Mapping[str, Assignment], policy: str,
                   why: Callable[[JobView, Assignment], str]) -> dict[str, str]:
    """`Decision.shrinks`: for every running job of `jobs` that `decided` gives fewer GPUs than
    it holds (and some), `POLICY: why`, the policy's own words (`why` of the job and its new
    assignment)."""
    out: dict[str, str] = {}
    for view in jobs:
        a = decided.get(view.spec.name)
        if (a is not None and view.is_running and view.placement.slots
                and 0 < a.placement.num_gpus < view.placement.num_gpus):
            out[view.spec.name] = f"{policy}: {why(view, a)}"
    return out
