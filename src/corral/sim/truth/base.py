"""The ground-truth interface: how a model really trains, for the simulator only.

Two sources implement it: measured profiles (`profiles.py`) and the built-in catalog
(`catalog.py`). Policies never see a truth; simulated jobs observe it through what they run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass

from corral.core.jobs import LrRule
from corral.perf.efficiency import GradStats, gain


@dataclass(frozen=True, slots=True)
class AppLimits:
    """What a workload needs to know of an application to build its job specs."""

    app: str
    init_bsz: int  # M0: the smallest validated total batch size
    max_bsz: int  # the largest validated total batch size
    min_local_bsz: int
    max_local_bsz: int
    epochs: int
    lr_rule: LrRule
    adaptive: bool = True  # False: runs at a fixed batch size (e.g. ncf in the Pollux runs)
    fixed_bsz: int | None = None  # the fixed total batch size of a non-adaptive application
    max_gpus: int | None = None  # most GPUs a job may use (the reference ran ncf on 1), None = any


class AppTruth(ABC):
    """True behaviour of one application (model + dataset)."""

    limits: AppLimits
    #: Seconds a job spends outside its training steps at the end of each epoch (validation,
    #: checkpoint; after the last, also exiting). The measured profiles leave it out (0).
    epoch_overhead_s: float = 0.0

    @abstractmethod
    def step_time(self, counts: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        """(step_s, sync_s) of one optimizer step without accumulation.

        `counts` are the GPUs on each occupied node, in node order.
        """

    @abstractmethod
    def grad_stats(self, total_bsz: float, epoch: int) -> tuple[float, float]:
        """(grad_sqr, grad_var) during `epoch` when training at total batch size `total_bsz`."""

    @abstractmethod
    def epoch_progress(self) -> tuple[float, ...]:
        """Cumulative progress (iterations at M0) at the end of each epoch, length = epochs."""

    def gain(self, total_bsz: float, epoch: int) -> float:
        """Scale-invariant iterations made per optimizer step (AdaScale's gain r)."""
        sqr, var = self.grad_stats(total_bsz, epoch)
        return float(gain(GradStats(sqr=sqr, var=var), total_bsz / self.limits.init_bsz))

    def epoch_gains(self, total_bsz: float, epochs: int) -> tuple[float, ...]:
        """`gain(total_bsz, e)` of epochs 0 .. `epochs` - 1; a source may compute it faster."""
        return tuple(self.gain(total_bsz, e) for e in range(epochs))

    def metric(self, epoch: int, total_bsz: float) -> float | None:
        """Validation metric after `epoch` epochs, where the source has it."""
        return None


class Truth(ABC):
    """A set of applications by name."""

    source: str

    @abstractmethod
    def apps(self) -> Mapping[str, AppTruth]:
        ...

    def app(self, name: str) -> AppTruth:
        from corral.core.errors import InputError

        apps = self.apps()
        if name not in apps:
            raise InputError(f"unknown application {name!r} in {self.source}; known: {', '.join(sorted(apps))}")
        return apps[name]

    def limits(self) -> dict[str, AppLimits]:
        return {name: a.limits for name, a in self.apps().items()}
