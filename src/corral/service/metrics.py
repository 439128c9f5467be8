"""Prometheus metrics of the live service, computed from its state at every scrape."""

from __future__ import annotations

from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from corral.service.jobs import LiveJob, LiveStatus
from corral.service.loop import ControlLoop
from corral.service.store import Store

__all__ = ["service_registry"]


class _ServiceCollector(Collector):
    def __init__(self, store: Store, loop: ControlLoop) -> None:
        self.store = store
        self.loop = loop

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        jobs = [LiveJob.from_doc(d) for d in self.store.jobs()]
        by_status = GaugeMetricFamily("corral_jobs", "Jobs by status", labels=["status"])
        for status in LiveStatus:
            by_status.add_metric([status.value], sum(j.status is status for j in jobs))
        yield by_status
        active = [j for j in jobs if j.status.active]
        yield GaugeMetricFamily("corral_gpus_total", "GPU (or CPU) slots of the cluster",
                                value=self.loop.cluster.total_gpus)
        yield GaugeMetricFamily("corral_gpus_allocated", "Slots assigned to jobs",
                                value=sum(j.placement.num_gpus for j in active))
        per_job = {
            "corral_job_gpus": ("Slots a job holds", lambda j: j.placement.num_gpus),
            "corral_job_steps": ("Optimizer steps a job completed", lambda j: j.steps),
            "corral_job_progress": ("Scale-invariant iterations a job completed",
                                    lambda j: j.progress),
            "corral_job_restarts": ("Placement changes of a running job", lambda j: j.restarts),
        }
        for name, (doc, value) in per_job.items():
            family = GaugeMetricFamily(name, doc, labels=["job"])
            for j in active:
                family.add_metric([j.id], value(j))
            yield family
        with self.loop.lock:
            rounds, decide_s, restarts = (self.loop.rounds, self.loop.decide_s_total,
                                          self.loop.restarts_total)
        yield CounterMetricFamily("corral_scheduling_rounds", "Policy calls", value=rounds)
        yield CounterMetricFamily("corral_policy_decide_seconds", "Time spent in policy calls",
                                  value=decide_s)
        yield CounterMetricFamily("corral_restarts", "Checkpoint-restarts ordered", value=restarts)


def service_registry(store: Store, loop: ControlLoop) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ServiceCollector(store, loop))
    return registry
