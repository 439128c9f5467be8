"""`hesrpt`: heSRPT, the optimal allocation of GPUs among jobs with speedup k^p (an oracle).

heSRPT (Berg, Vesilo, Harchol-Balter, Performance'20): jobs present at time 0 with speedup
k^p (0 < p < 1) on divisible servers; the i-th largest of m jobs gets the share
`theta_i = (i/m)^(1/(1-p)) - ((i-1)/m)^(1/(1-p))`, so jobs finish in SRPT order (Theorem 5
gives the optimal flow time). Work is `remaining_s_user * gpus^p` from `JobView.oracle`; `p`
is a parameter (0.5), not a fit. Decided here: whole GPUs by largest-remainder rounding of
theta_i x cluster, capped at `max_gpus` (the rest to the next smaller job); arrivals re-ranked.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from corral.core.cluster import Placement
from corral.core.jobs import Assignment, Decision, JobView, Snapshot
from corral.core.policy import Keeps, Policy, Promises, Reads, register_policy
from corral.core.reasons import waiting_reasons
from corral.policies.placement import anywhere, consolidated, free_gpus, take


def hesrpt_fractions(m: int, p: float) -> list[float]:
    """theta_1 .. theta_m: the server fractions of the m remaining jobs, largest job first."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"heSRPT needs 0 < p < 1, got {p}")
    e = 1.0 / (1.0 - p)
    return [(i / m) ** e - ((i - 1) / m) ** e for i in range(1, m + 1)]


def hesrpt_total_flow_time(sizes: Sequence[float], p: float, servers: float) -> float:
    """The optimal total flow time of jobs present at 0 with sizes `sizes` (work on one server)
    and speedup k^p on `servers` divisible servers (the closed form of the module docstring)."""
    e = 1.0 / (1.0 - p)
    xs = sorted(sizes, reverse=True)
    return sum(x * (k ** e - (k - 1) ** e) ** (1.0 - p)
               for k, x in enumerate(xs, start=1)) / servers ** p


def whole_shares(fractions: Sequence[float], total: int, caps: Sequence[int]) -> list[int]:
    """Whole GPU counts close to `fractions` x `total` (largest remainder), each at most its
    cap; GPUs a cap leaves over go to the entries with room nearest the end (smallest jobs)."""
    want = [f * total for f in fractions]
    rounded = [int(math.floor(w)) for w in want]
    order = sorted(range(len(want)), key=lambda i: (-(want[i] - rounded[i]), -i))
    for i in order[:max(0, total - sum(rounded))]:
        rounded[i] += 1
    out = [min(r, c) for r, c in zip(rounded, caps)]
    left = total - sum(out)
    for i in range(len(want) - 1, -1, -1):
        give = max(0, min(left, caps[i] - out[i]))
        out[i] += give
        left -= give
    return out


@register_policy
class HeSrpt(Policy):
    name = "hesrpt"
    summary = "heSRPT (Berg et al.): optimal GPU shares for speedup k^p by remaining work"
    promises = Promises(reads=Reads.VIEWS | Reads.ORACLE, keeps=Keeps.DECISION_UNTIL_CHANGE)

    @dataclass
    class Params:
        p: float = 0.5  # exponent of the assumed speedup k^p, 0 < p < 1

        def __post_init__(self) -> None:
            if not 0.0 < self.p < 1.0:
                raise ValueError(f"p must be in (0, 1), got {self.p}")

    def decide(self, snapshot: Snapshot) -> Decision:
        p = self.params.p
        cluster = snapshot.cluster

        def size(view: JobView) -> float:
            if view.oracle is None:
                raise RuntimeError("hesrpt needs JobView.oracle; run it where oracle data exists")
            return view.oracle.remaining_s_user * view.spec.gpus ** p

        ordered = sorted(snapshot.jobs, key=lambda v: (-size(v), -v.spec.submit_time_s))
        if not ordered:
            return Decision({})
        total = cluster.total_gpus
        caps = [max(0, min(v.spec.max_gpus, total)) for v in ordered]
        shares = whole_shares(hesrpt_fractions(len(ordered), p), total, caps)
        free = free_gpus(cluster, {})
        out: dict[str, Assignment] = {}
        movers = []
        for view, k in zip(ordered, shares):  # keep unchanged running jobs where they are
            cur = view.placement
            if k and cur and cur.num_gpus == k and all(free[n] >= g for n, g in cur.slots):
                take(free, cur)
                out[view.name] = self._assignment(view, cur)
            elif k:
                movers.append((view, k))
        for view, k in reversed(movers):  # smallest (largest share) first
            where = consolidated(free, k) or anywhere(free, k)
            if where is not None:
                take(free, where)
                out[view.name] = self._assignment(view, where)
        zero = {v.name for v, k in zip(ordered, shares) if not k}
        return Decision(out, waiting_reasons(
            ordered[::-1], out, cluster, self.name,
            lambda v, above: "heSRPT share of 0 GPUs: more remaining work than the jobs it "
            "runs" if v.name in zero else "its share did not fit beside smaller jobs",
            need=lambda v: 1))

    @staticmethod
    def _assignment(view: JobView, placement: Placement) -> Assignment:
        if view.spec.adaptive:
            return Assignment(placement)
        return Assignment.user_config(view.spec, placement)
