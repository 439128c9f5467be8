"""Why a job waits under queues: its queue's quota, another queue's protected job, or what its
inner policy said (`queue_reasons`).

A reason is shown to the job's own team, so it names the job's own queue and says "another
queue" for the rest: an inner policy sees only its queue's jobs, and the texts made here name
no job of another queue.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

from corral.core.cluster import Cluster
from corral.core.jobs import Assignment, JobView
from corral.core.queues import QueueTree
from corral.core.reasons import WaitKind, WaitReason

__all__ = ["queue_reasons", "clock_text"]


def clock_text(t_s: float) -> str:
    """`t_s` as a time of day, HH:MM:SS UTC (the live loop's clock is the epoch; the
    simulator's seconds from the workload's start read as elapsed time)."""
    return time.strftime("%H:%M:%S", time.gmtime(t_s))


def queue_reasons(now_s: float, cluster: Cluster, tree: QueueTree,
                  by_queue: Mapping[str, Sequence[JobView]], merged: Mapping[str, Assignment],
                  share: Mapping[str, int], inner: Mapping[str, WaitReason], elastic: bool) -> dict[str, WaitReason]:
    """A reason, with its queue, for every job of `by_queue` (leaf queue -> its jobs) that
    `merged` (the layer's decision) leaves without GPUs:

    * PROTECTED when its queue holds less than its quota while another queue holds more than
      its `share` this round (the layer's shares) through jobs that (re)started less than
      `min_runtime_s` ago;
    * QUOTA when its queue holds its quota (or its limit) and the idle GPUs cannot hold it;
    * else its inner policy's reason (`inner`: from when it was last asked), or, where there is none (a gang no type of the
      queue's share holds whole, or a queue given no GPUs), a NO_FIT of the layer's. A job
      needs its `min_gpus` (at least 1) under an `elastic` inner policy, else its whole gang.
    """
    held = {q: sum(merged[v.spec.name].num_gpus for v in views if v.spec.name in merged)
            for q, views in by_queue.items()}
    idle = cluster.total_gpus - sum(held.values())
    protected_until = _protected_until(now_s, tree, by_queue, merged, held, share)
    out: dict[str, WaitReason] = {}
    for q, views in by_queue.items():
        quota = tree.quota(q)
        limit = tree[q].any_limit  # (a limit per GPU type: not said here)
        for v in views:
            name = v.spec.name
            if name in merged:
                continue
            need = max(1, v.spec.min_gpus) if elastic else max(v.spec.gpus, v.spec.min_gpus)
            until = protected_until.get(q)
            if held[q] < quota and until is not None:
                out[name] = WaitReason(
                    WaitKind.PROTECTED, f"protected: a job of another queue runs under "
                    f"min_runtime until {clock_text(until)}; queue {q} holds "
                    f"{held[q]}/{quota}", q)
            elif limit is not None and held[q] + need > limit:
                out[name] = WaitReason(WaitKind.QUOTA, f"queue {q} is at its limit: it holds "
                                       f"{held[q]} of {limit} GPU(s)", q)
            elif held[q] >= quota and idle < need:
                borrow = ("nothing is idle to borrow" if idle == 0
                          else f"{idle} idle GPU(s), it needs {need}")
                out[name] = WaitReason(WaitKind.QUOTA, f"queue {q} holds its quota "
                                       f"{held[q]}/{quota} and {borrow}", q)
            else:
                said = inner.get(name)
                if said is None or said.kind in (WaitKind.ARRIVING, WaitKind.UNEXPLAINED):
                    said = WaitReason(WaitKind.NO_FIT, f"queue {q}: its share holds no "
                                      f"{need} GPU(s) of one type for it; it holds "
                                      f"{held[q]}/{quota}")
                out[name] = said if said.queue == q else WaitReason(said.kind, said.text, q)
    return out


def _protected_until(now_s: float, tree: QueueTree, by_queue: Mapping[str, Sequence[JobView]],
                     merged: Mapping[str, Assignment], held: Mapping[str, int],
                     share: Mapping[str, int]) -> dict[str, float]:
    """Per queue below its quota with jobs waiting: the earliest end of `min_runtime_s` of the
    jobs that keep another queue above its share (none: no entry)."""
    guard = tree.min_runtime_s
    if not guard:
        return {}
    ends: dict[str, float] = {}  # per queue above its share: its protected jobs' earliest end
    for q, views in by_queue.items():
        if held[q] <= share.get(q, 0):
            continue
        for v in views:
            a = merged.get(v.spec.name)
            started = v.started_s
            if a is not None and started is not None and now_s - started < guard:
                ends[q] = min(ends.get(q, math.inf), started + guard)
    out: dict[str, float] = {}
    for q, views in by_queue.items():
        if held[q] < tree.quota(q) and any(v.spec.name not in merged for v in views):
            others = [t for other, t in ends.items() if other != q]
            if others:
                out[q] = min(others)
    return out
