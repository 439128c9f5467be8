"""Cloud auto-scaling of one training job (Pollux (OSDI'21) §5.4.1): the job rents whole nodes
and their number changes over time.

Every `interval_s` an autoscaler picks the node count from the job's fitted models; a change
costs the checkpoint-restart pause and every node-second is paid. `GoodputAutoscaler`
(Pollux): scale while predicted goodput per GPU stays above L = 1/2 of the ideal.
`ThroughputAutoscaler` (Or et al., MLSys'20): fixed per-GPU batch, scale while throughput
efficiency stays >= L. Decided here: both grow to at most twice the GPUs run on, both scale
down to target, all GPUs of rented nodes are used, start on `start_nodes`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from corral.core.cluster import Placement
from corral.core.errors import InputError
from corral.core.jobs import Assignment, BatchConfig, JobSpec, JobView
from corral.perf.throughput import iteration_time
from corral.sim.loop.job import SimJob
from corral.sim.truth.base import Truth

__all__ = ["Autoscaler", "GoodputAutoscaler", "ThroughputAutoscaler", "AutoscaleResult",
           "simulate_autoscaling", "nodes_placement"]


def nodes_placement(nodes: int, gpus_per_node: int) -> Placement:
    """All GPUs of nodes 0..nodes-1."""
    return Placement.of({n: gpus_per_node for n in range(nodes)})


class Autoscaler(ABC):
    """Picks a job's node count from its fitted models."""

    name: str

    @abstractmethod
    def desired_nodes(self, view: JobView, nodes: int, gpus_per_node: int, max_nodes: int) -> int:
        """Nodes the job should hold next interval."""

    def batch(self, spec: JobSpec, num_gpus: int) -> BatchConfig | None:
        """The batch to run with on `num_gpus` GPUs; None lets the job's agent choose."""
        return None

    @staticmethod
    def _node_cap(view: JobView, nodes: int, gpus_per_node: int, max_nodes: int) -> int:
        """At most twice the GPUs the job has run on (whole nodes), at least its current size."""
        observed = view.estimator.max_gpus_observed if view.estimator is not None else 0
        explored = max(observed, view.num_gpus, 1)
        return max(1, min(max_nodes, max(nodes, (2 * explored) // gpus_per_node)))

    @staticmethod
    def _target(eff: np.ndarray, nodes: int, up: float, target: float) -> int:
        """eff[n-1] = scaling efficiency on n nodes. Above `up`: grow to the most nodes still
        at or above `target`; below `target`: shrink to that; else stay."""
        current = eff[nodes - 1] if nodes <= len(eff) else 0.0
        if target <= current <= up:
            return nodes
        ok = np.flatnonzero(eff >= target)
        return int(ok[-1]) + 1 if len(ok) else 1


@dataclass(frozen=True)
class GoodputAutoscaler(Autoscaler):
    """Pollux §5.4.1: scale up when goodput/GPU > U x ideal, to goodput ~ L x ideal."""

    up: float = 2.0 / 3.0  # U
    target: float = 0.5  # L
    name: str = "goodput (Pollux)"

    def desired_nodes(self, view: JobView, nodes: int, gpus_per_node: int, max_nodes: int) -> int:
        fn = view.estimator.goodput_fn() if view.estimator is not None else None
        if fn is None:
            return nodes
        ideal = fn.optimize(1, 1)[0]
        if ideal <= 0:
            return nodes
        cap = self._node_cap(view, nodes, gpus_per_node, max_nodes)
        n = np.arange(1, cap + 1)
        gpus = n * gpus_per_node
        eff = fn.optimize(n, gpus)[0] / (gpus * ideal)
        return self._target(eff, nodes, self.up, self.target)


@dataclass(frozen=True)
class ThroughputAutoscaler(Autoscaler):
    """Or et al.: fixed per-GPU batch; grow while throughput scaling efficiency >= threshold."""

    threshold: float = 0.5
    local_bsz: int | None = None  # per-GPU batch; None = the job's M0, up to what fits
    name: str = "throughput (Or et al.)"

    def _local(self, spec: JobSpec) -> int:
        m = self.local_bsz if self.local_bsz is not None else spec.init_bsz
        return max(spec.min_local_bsz, min(int(m), spec.max_local_bsz))

    def batch(self, spec: JobSpec, num_gpus: int) -> BatchConfig:
        m = self._local(spec)
        cap = max(spec.max_bsz, spec.init_bsz) // max(num_gpus, 1)
        return BatchConfig(max(1, min(m, cap)), 0)

    def desired_nodes(self, view: JobView, nodes: int, gpus_per_node: int, max_nodes: int) -> int:
        params = view.estimator.throughput_params() if view.estimator is not None else None
        if params is None:
            return nodes
        spec = view.spec
        cap = self._node_cap(view, nodes, gpus_per_node, max_nodes)
        n = np.arange(1, cap + 1)
        gpus = n * gpus_per_node
        m = np.array([self.batch(spec, int(k)).local_bsz for k in gpus])
        per_gpu = m / np.asarray(iteration_time(params, n, gpus, m, 0))
        single = self._local(spec) / float(iteration_time(params, 1, 1, self._local(spec), 0))
        # throughput scaling does not improve over time: no band, go to the most efficient size
        return self._target(per_gpu / single, nodes, up=-math.inf, target=self.threshold)


@dataclass
class AutoscaleResult:
    autoscaler: str
    app: str
    jct_s: float | None  # None: unfinished at max_time_s
    node_hours: float
    gpu_hours: float
    resizes: int
    max_nodes_used: int
    timeline: list[tuple[float, int, int]] = field(default_factory=list)  # (s, nodes, batch)


def simulate_autoscaling(truth: Truth, spec: JobSpec, autoscaler: Autoscaler, *,
                         gpus_per_node: int = 4, max_nodes: int = 16, start_nodes: int = 1,
                         interval_s: float = 60.0, restart_s: float = 30.0,
                         max_time_s: float = 30 * 86400.0) -> AutoscaleResult:
    """Run one job from time 0 on rented nodes, resized by `autoscaler` every `interval_s`."""
    if gpus_per_node < 1 or max_nodes < 1 or not 1 <= start_nodes <= max_nodes:
        raise InputError("autoscaling needs gpus_per_node >= 1 and 1 <= start_nodes <= max_nodes")
    if interval_s <= 0 or restart_s < 0:
        raise InputError("autoscaling needs interval_s > 0 and restart_s >= 0")
    job = SimJob(spec, truth.app(spec.app))
    job.clock_s = 0.0
    nodes = start_nodes

    def resize(now: float, count: int) -> None:
        k = count * gpus_per_node
        job.assign(now, Assignment(nodes_placement(count, gpus_per_node),
                                   autoscaler.batch(spec, k)), restart_s)

    resize(0.0, nodes)
    assert job.batch is not None  # (placed: it trains with a batch)
    timeline = [(0.0, nodes, job.batch.total(nodes * gpus_per_node))]
    node_s = 0.0
    resizes = 0
    most = nodes
    t = 0.0
    while job.finish_s is None and t < max_time_s:
        t_next = t + interval_s
        job.advance(t_next)
        end = job.finish_s if job.finish_s is not None else t_next
        node_s += nodes * (end - t)
        t = t_next
        if job.finish_s is not None:
            break
        want = max(1, min(max_nodes, autoscaler.desired_nodes(job.view(), nodes, gpus_per_node,
                                                                max_nodes)))
        if want != nodes:
            nodes = want
            resize(t, nodes)
            resizes += 1
            most = max(most, nodes)
        total = job.batch.total(nodes * gpus_per_node)
        if timeline[-1][1:] != (nodes, total):
            timeline.append((t, nodes, total))
    return AutoscaleResult(
        autoscaler=autoscaler.name, app=spec.app, jct_s=job.finish_s, node_hours=node_s / 3600,
        gpu_hours=node_s * gpus_per_node / 3600, resizes=resizes, max_nodes_used=most,
        timeline=timeline)
