"""What a queue's jobs ask of the cluster: the GPUs a quota guarantees each job and the GPUs
it could use now (`job_demand`), and, where quotas are per GPU type, per type (`type_demand`).
The tenancy layer sums them per queue for `corral.core.queues.shares`."""

from __future__ import annotations

from collections.abc import Mapping

from corral.core.jobs import JobView
from corral.core.policy import Policy

__all__ = ["is_elastic", "job_demand", "type_demand"]


def is_elastic(policy: Policy) -> bool:
    """Does `policy` move or resize running jobs (so a queue's share may shrink its jobs in
    place)? Gang schedulers that promise to keep running jobs as they are
    (`Keeps.RUNNING_WHEN_NONE_WAITS`: fifo, srtf, tiresias) do not."""
    return not policy.promises.keeps_running


def job_demand(view: JobView, total_gpus: int, elastic: bool) -> tuple[int, int]:
    """(GPUs a queue's quota guarantees the job, GPUs it could use now).

    A gang job: what it holds when running, its requested GPUs when waiting, both. A job of an
    elastic policy is guaranteed what it asked for, running or not (a job running on fewer
    GPUs than it asked brings its queue's quota back, issue 43), and could use up to twice
    what it holds (as Pollux explores), within `max_gpus`: its growth beyond the ask is only
    borrowed, never taken from another queue's quota."""
    spec = view.spec
    asked = min(max(spec.gpus, spec.min_gpus), total_gpus)
    if view.is_running and view.assignment is not None:
        held = view.num_gpus
        if not elastic:
            return held, held
        return asked, max(held, min(spec.max_gpus, max(2 * held, asked), total_gpus))
    return asked, asked


def type_demand(by_queue: Mapping[str, list[JobView]], gpu_type: str, capacity: int,
                elastic: bool, limits: Mapping[str, int] | None = None,
                ) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """(demand, base, held) per queue on the `capacity` GPUs of `gpu_type`, where quotas are
    per type: a running job counts on the type it runs on; a waiting one on each type it may
    run on (its `gpu_type`, else every type whose GPUs, and its queue's `limits` of that type,
    could hold it), since it may start on any of them (`job_demand` for each job). `by_queue`
    holds the jobs not running elsewhere."""
    demand, base, held = {}, {}, {}
    limits = limits or {}
    for q, views in by_queue.items():
        room = min(capacity, limits.get(q, capacity))
        h = b = d = 0
        for v in views:
            if v.is_running and v.assignment is not None:
                h += v.assignment.placement.num_gpus
            else:
                spec = v.spec
                least = max(1, spec.min_gpus) if elastic else max(spec.gpus, spec.min_gpus)
                if spec.gpu_type not in (None, gpu_type) or least > room:
                    continue
            vb, vd = job_demand(v, capacity, elastic)
            b += vb
            d += vd
        demand[q], base[q], held[q] = d, b, h
    return demand, base, held
