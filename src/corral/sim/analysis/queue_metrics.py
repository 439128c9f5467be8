"""Per-queue figures of a simulation run under queues (`corral simulate --queues/--quotas`).

For each leaf queue, from the run's job records (`JobRecord.queue`) and allocation history
(`SimResult.allocations`), `queue_summary` gives: `jobs`, `finished`, `avg_jct_s`,
`avg_queueing_s` (active without GPUs, per job); `quota_gpus`, `gpu_hours` held against
`guaranteed_gpu_hours` (quota from first submission to last finish) and their ratio;
`longest_starved_s` (`_longest_starved`); `ftf_mean`, `ftf_max` (finish-time fairness of
finished jobs, `metrics.job_ftf`). `resolve_queues` turns `--quotas proportional` into a tree:
each tenant's quota its share of the trace's GPU-time (`workload_queue_gpu_s`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.core.queues import QueueTree, proportional_queues
from corral.sim.analysis.metrics import job_ftf
from corral.sim.loop.results import SimResult
from corral.sim.workloads import Workload

__all__ = ["QUEUE_FIELDS", "QueueSetup", "queue_summary", "resolve_queues", "workload_queue_gpu_s"]

#: A queue tree, or "proportional" (quotas from each workload's GPU-time).
QueueSetup = QueueTree | str

QUEUE_FIELDS: tuple[str, ...] = (
    "jobs", "finished", "avg_jct_s", "avg_queueing_s", "quota_gpus", "gpu_hours",
    "guaranteed_gpu_hours", "received_vs_guaranteed", "longest_starved_s", "ftf_mean", "ftf_max")


def workload_queue_gpu_s(workload: Workload) -> dict[str | None, float]:
    """GPU-seconds of the source trace per tenant: `Workload.trace_gpu_s` where the trace says, else
    GPUs x duration, else GPUs."""
    trace = workload.trace_gpu_s or {}
    out: dict[str | None, float] = {}
    for spec in workload.jobs:
        if spec.name in trace:
            gpu_s = float(trace[spec.name])
        elif spec.trace_duration_s is not None:
            gpu_s = spec.gpus * float(spec.trace_duration_s)
        else:
            gpu_s = float(spec.gpus)
        out[spec.queue] = out.get(spec.queue, 0.0) + gpu_s
    return out


def resolve_queues(setup: QueueSetup, workload: Workload, total_gpus: int) -> QueueTree:
    """The queue tree one workload runs under: `setup` itself, or its proportional quotas."""
    if isinstance(setup, QueueTree):
        return setup
    if setup != "proportional":
        raise ValueError(f"unknown queue setup {setup!r}")
    return proportional_queues(workload_queue_gpu_s(workload), total_gpus)


def _longest_starved(result: SimResult, tree: QueueTree, leaf_of: Mapping[str, str],
                     end_s: float) -> dict[str, float]:
    """Per leaf: the longest stretch during which the queue had a job waiting, held fewer GPUs than
    its quota, and another queue held more than its own quota (borrowed)."""
    events: list[tuple[float, int, str, int]] = []  # (time, order, job, gpus from then on)
    for j in result.jobs:
        events.append((j.submit_s, 0, j.name, 0))
        for t, g in result.allocations.get(j.name, ()):
            events.append((t, 1, j.name, g))
        if j.finish_s is not None:
            events.append((j.finish_s, 2, j.name, -1))
    events.sort(key=lambda e: (e[0], e[1]))
    leaves = tree.leaves
    quota = {q: tree.quota(q) for q in leaves}
    usage = dict.fromkeys(leaves, 0)
    waiting = dict.fromkeys(leaves, 0)
    holding: dict[str, int] = {}
    since: dict[str, float | None] = dict.fromkeys(leaves)
    longest = dict.fromkeys(leaves, 0.0)

    def judge(now: float) -> None:
        borrowers = {q for q in leaves if usage[q] > quota[q]}
        for q in leaves:
            starved = waiting[q] > 0 and usage[q] < quota[q] and bool(borrowers - {q})
            start = since[q]
            if starved and start is None:
                since[q] = now
            elif not starved and start is not None:
                longest[q] = max(longest[q], now - start)
                since[q] = None

    i = 0
    while i < len(events):
        now = events[i][0]
        while i < len(events) and events[i][0] == now:
            _, kind, name, gpus = events[i]
            q = leaf_of[name]
            before = holding.get(name)
            if kind == 0:
                holding[name] = 0
                waiting[q] += 1
            elif before is not None:
                after = 0 if kind == 2 else gpus
                usage[q] += after - before
                waiting[q] += (after == 0) - (before == 0)
                if kind == 2:
                    waiting[q] -= after == 0
                    del holding[name]
                else:
                    holding[name] = after
            i += 1
        judge(now)
    for q, start in since.items():
        if start is not None:
            longest[q] = max(longest[q], end_s - start)
    return longest


def queue_summary(result: SimResult, tree: QueueTree) -> dict[str, dict[str, Any]]:
    """{leaf queue: figures} for one run (module docstring); queues without jobs left out."""
    leaf_of = {j.name: tree.leaf_for(j.queue) for j in result.jobs}
    first = min((j.submit_s for j in result.jobs), default=0.0)
    ends = [j.finish_s for j in result.jobs if j.finish_s is not None]
    ends += [t for t, _ in result.gpu_timeline[-1:]]
    end = max(ends, default=first)
    span_h = max(0.0, end - first) / 3600.0
    starved = (_longest_starved(result, tree, leaf_of, end) if result.allocations
               else dict.fromkeys(tree.leaves))
    out: dict[str, dict[str, Any]] = {}
    for q in tree.leaves:
        jobs = [j for j in result.jobs if leaf_of[j.name] == q]
        if not jobs:
            continue
        done = [j for j in jobs if j.finish_s is not None]
        ftfs = [r for r in (job_ftf(j) for j in done) if r is not None]
        gpu_h = sum(j.attained_gpu_s for j in jobs) / 3600.0
        guaranteed = tree.quota(q) * span_h
        out[q] = {
            "jobs": len(jobs),
            "finished": len(done),
            "avg_jct_s": (sum(j.finish_s - j.submit_s for j in done if j.finish_s is not None)
                          / len(done) if done else None),
            "avg_queueing_s": sum(j.queue_time_s for j in jobs) / len(jobs),
            "quota_gpus": tree.quota(q),
            "gpu_hours": gpu_h,
            "guaranteed_gpu_hours": guaranteed,
            "received_vs_guaranteed": gpu_h / guaranteed if guaranteed > 0 else None,
            "longest_starved_s": starved[q],
            "ftf_mean": sum(ftfs) / len(ftfs) if ftfs else None,
            "ftf_max": max(ftfs) if ftfs else None,
        }
    return out
