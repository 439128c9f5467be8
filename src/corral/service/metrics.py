"""Prometheus metrics of the live service, computed from its state at every scrape.

Gauges: jobs by status, the cluster's slots, slots reserved (assigned by the policy) and running
(with live workers), and per active job its slots, steps, progress and restarts (labelled by
queue under queues). Counters (since
this service started): scheduling rounds, policy time, restarts, completions, failures,
preemptions and crash retries. A summary: the pause of every resize, by mechanism. Under
`corral serve --queues`, per queue: its quota, GPUs used (held), borrowed and lent, active and
waiting jobs, and its longest wait below quota.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from corral.service.jobs import LiveJob, LiveStatus
from corral.service.loop import ControlLoop
from corral.service.records import RESIZE_MECHANISMS
from corral.service.store import Store
from corral.service.tenants import queue_rows

__all__ = ["service_registry"]


class _ServiceCollector(Collector):
    def __init__(self, store: Store, loop: ControlLoop) -> None:
        self.store = store
        self.loop = loop

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | SummaryMetricFamily]:
        counts = self.store.status_counts()  # every job ever submitted: not read one by one
        by_status = GaugeMetricFamily("corral_jobs", "Jobs by status", labels=["status"])
        for status in LiveStatus:
            by_status.add_metric([status.value], counts.get(status.value, 0))
        yield by_status
        active = [LiveJob.from_doc(d) for d in self.store.jobs(
            s.value for s in LiveStatus if s.active)]
        yield GaugeMetricFamily("corral_gpus_total", "GPU (or CPU) slots of the cluster",
                                value=self.loop.cluster.total_gpus)
        reserved = sum(j.placement.num_gpus for j in active)
        yield GaugeMetricFamily("corral_gpus_allocated", "Slots assigned to jobs (= reserved)",
                                value=reserved)
        yield GaugeMetricFamily("corral_gpus_reserved", "Slots the policy assigned to jobs",
                                value=reserved)
        per_job = {
            "corral_job_gpus": ("Slots a job holds", lambda j: j.placement.num_gpus),
            "corral_job_steps": ("Optimizer steps a job completed", lambda j: j.steps),
            "corral_job_progress": ("Scale-invariant iterations a job completed",
                                    lambda j: j.progress),
            "corral_job_restarts": ("Placement changes of a running job", lambda j: j.restarts),
        }
        tree = getattr(self.loop.policy, "queues", None)  # under queues: a queue label too
        for name, (doc, value) in per_job.items():
            family = GaugeMetricFamily(name, doc, labels=["job", "queue"] if tree else ["job"])
            for j in active:
                family.add_metric([j.id, tree.leaf_for(j.spec.queue)] if tree else [j.id],
                                  value(j))
            yield family
        loop = self.loop
        with loop.lock:
            running = loop.gpus_running
            counters = {
                "corral_scheduling_rounds": ("Scheduling rounds: the policy asked, or its "
                                             "last decision standing", loop.rounds),
                "corral_policy_decide_seconds": ("Time spent in policy calls",
                                                 loop.decide_s_total),
                "corral_restarts": ("Restarts: resizes, resumes after preemption, crash retries",
                                    loop.restarts_total),
                "corral_completions": ("Jobs that finished", loop.completions_total),
                "corral_failures": ("Jobs that failed", loop.failures_total),
                "corral_preemptions": ("Jobs preempted (stopped to wait, resumable)",
                                       loop.preemptions_total),
                "corral_crash_retries": ("Restarts after worker failures",
                                         loop.crash_retries_total),
            }
            pauses = {m: tuple(t) for m, t in loop.resize_pauses.items()}
        resize = SummaryMetricFamily("corral_resize_pause_seconds",
                                     "How long training paused at each resize since the service "
                                     "started, by mechanism", labels=["mechanism"])
        for mechanism in RESIZE_MECHANISMS:
            count, seconds = pauses.get(mechanism, (0, 0.0))
            resize.add_metric([mechanism], count_value=int(count), sum_value=seconds)
        yield resize
        yield from self._queues()
        yield GaugeMetricFamily("corral_gpus_running",
                                "Slots whose workers run now (reserved slots wait for workers to "
                                "start, or for a stopping job to free them)", value=running)
        for name, (doc, total) in counters.items():
            yield CounterMetricFamily(name, f"{doc} since the service started", value=total)


    def _queues(self) -> Iterator[GaugeMetricFamily]:
        """Per queue (a `QueuedPolicy`'s tree, cohorts included): quota, GPUs used, borrowed,
        active and waiting jobs."""
        tree = getattr(self.loop.policy, "queues", None)
        if tree is None:
            return
        used, active, waiting, by_type = self.loop.queue_usage()
        rows = queue_rows(tree, used, active, waiting, None, used_by_type=by_type)
        lent_and_waits(rows, self.loop.queue_longest_waits())
        for name, doc, key in (
                ("corral_queue_quota_gpus", "GPUs guaranteed to a queue", "quota"),
                ("corral_queue_used_gpus", "GPUs a queue's jobs hold (a cohort: its subtree's)",
                 "used"),
                ("corral_queue_borrowed_gpus", "GPUs a queue holds above its quota", "borrowed"),
                ("corral_queue_jobs", "Active jobs of a queue", "jobs"),
                ("corral_queue_waiting_jobs", "Jobs of a queue waiting for GPUs", "waiting"),
                ("corral_queue_lent_gpus", "GPUs of a queue's quota it does not use that other "
                 "queues hold (its unused quota's share of all GPUs borrowed)", "lent"),
                ("corral_queue_longest_wait_below_quota_seconds",
                 "How long a queue's longest-waiting job has waited while the queue holds less "
                 "than its quota (0: none waits so; a kept quota promise keeps it under a "
                 "round)", "wait_below_quota_s")):
            family = GaugeMetricFamily(name, doc, labels=["queue"])
            for row in rows:
                family.add_metric([row["name"]], row[key])
            yield family
        per_type = [("corral_queue_type_used_gpus",
                     "GPUs of one type a queue's jobs hold (a cohort: its subtree's)",
                     "used_by_type")]
        if tree.typed:
            per_type += [("corral_queue_type_quota_gpus",
                          "GPUs of one type guaranteed to a queue (quotas per type)",
                          "quota_by_type"),
                         ("corral_queue_type_borrowed_gpus",
                          "GPUs of one type a queue holds above its quota of that type",
                          "borrowed_by_type")]
        for name, doc, key in per_type:
            family = GaugeMetricFamily(name, doc, labels=["queue", "gpu_type"])
            for row in rows:
                for gpu_type, gpus in row[key].items():
                    family.add_metric([row["name"], gpu_type], gpus)
            yield family


def lent_and_waits(rows: list[dict[str, Any]], waits: Mapping[str, float]) -> None:
    """Add to each `queue_rows` row `lent` (its unused quota, times the share of all unused
    quota that other queues borrow: GPUs it lends now) and `wait_below_quota_s` (its
    longest-waiting leaf job's wait while it holds less than its quota, else 0)."""
    leaves = [r for r in rows if r["leaf"]]
    borrowed = sum(r["borrowed"] for r in leaves)
    unused = sum(max(0, r["quota"] - r["used"]) for r in leaves)
    ratio = min(1.0, borrowed / unused) if unused else 0.0
    for r in rows:
        r["lent"] = max(0, r["quota"] - r["used"]) * ratio
        below = r["used"] < r["quota"]
        r["wait_below_quota_s"] = waits.get(r["name"], 0.0) if below and r["leaf"] else 0.0


def service_registry(store: Store, loop: ControlLoop) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ServiceCollector(store, loop))
    return registry
