"""SideCar's time predictions (SC'20 §III-C-1).

A new job on N GPUs completes in `start + T_train(N)`; a reshaped one has `resize overhead +
T_train(N')` left (overheads: `corral.perf.overheads`; the final checkpoint every option pays is
left out). `T_train(N) = remaining iterations x t_iter(N)`: SideCar's jobs state their epochs,
so corral reads `JobView.oracle.remaining_s_user` (oracle policies) and scales other GPU counts
by the application's pooled throughput model (`AppSpeedProfiles`), or, before any ran, by
speed ~ N^0.63 (§I: 4 GPUs 2.4x one). The global batch stays the user's (§VI-E).
"""

from __future__ import annotations

import math

from corral.core.jobs import JobView, Snapshot
from corral.perf.app_speed import AppSpeedProfiles
from corral.perf.overheads import ReshapeOverheads

__all__ = ["SidecarTimeModel", "PRIOR_SPEEDUP_EXP"]

#: Speed ~ N^exp before any measurement: the paper's ResNet runs 2.4x faster on 4 GPUs (§I).
PRIOR_SPEEDUP_EXP = math.log(2.4) / math.log(4.0)


class SidecarTimeModel:
    """Predicted seconds to completion of jobs for candidate GPU counts."""

    def __init__(self, overheads: ReshapeOverheads, gpus_per_node: int) -> None:
        self.overheads = overheads
        self.gpus_per_node = max(1, gpus_per_node)
        self.speeds = AppSpeedProfiles()
        self._cache: dict[tuple[str, int], float] = {}

    def update(self, snapshot: Snapshot) -> None:
        """Pool new measurements; forget predictions of the previous round; take the node size
        from this snapshot's cluster (live, nodes may join or leave)."""
        self.gpus_per_node = max(1, snapshot.cluster.max_node_gpus)
        self.speeds.observe(snapshot.jobs)
        self._cache.clear()

    def _iter_s(self, view: JobView, num_gpus: int) -> float | None:
        batch = view.spec.user_batch(num_gpus)
        nodes = math.ceil(num_gpus / self.gpus_per_node)
        return self.speeds.iteration_s(view.spec.app, nodes, num_gpus, batch.local_bsz,
                                       batch.accum_steps)

    def train_s(self, view: JobView, num_gpus: int) -> float:
        """Seconds of training left on `num_gpus` GPUs, without overheads."""
        key = (view.name, num_gpus)
        if key not in self._cache:
            if view.oracle is None:
                raise RuntimeError("SideCar's time model needs JobView.oracle (an oracle policy)")
            ref = view.spec.gpus
            here, there = self._iter_s(view, num_gpus), self._iter_s(view, ref)
            if here is not None and there is not None and there > 0:
                ratio = here / there
            else:
                ratio = (ref / num_gpus) ** PRIOR_SPEEDUP_EXP
            self._cache[key] = view.oracle.remaining_s_user * ratio
        return self._cache[key]

    def new_job_s(self, view: JobView, num_gpus: int) -> float:
        """Completion time of a job started now on `num_gpus` GPUs."""
        return self.overheads.start_s + self.train_s(view, num_gpus)

    def running_s(self, view: JobView, num_gpus: int, new_host: bool = False) -> float:
        """Time left for a running job moved to `num_gpus` GPUs (unchanged: no overhead)."""
        if num_gpus == view.num_gpus and not new_host:
            return self.train_s(view, num_gpus)
        cost = self.overheads.resize_s(view.num_gpus, num_gpus, new_host)
        return cost + self.train_s(view, num_gpus)
