"""The ground-truth interface: how a model really trains, for the simulator only.

Three sources implement it: measured profiles (`profiles.py`), the built-in catalog
(`catalog.py`) and Gavel's throughput table (`gavel.py`). Policies never see a truth; simulated
jobs observe it through what they run. GPU types: an `AppTruth` answers `step_time` for its own
type (`gpu_type`, "" = the one unnamed type of a homogeneous cluster); `for_type(t)` gives the
same application on type `t` (same limits, gradient statistics and progress; that type's step
and sync times), made once and kept; `gpu_types()` lists the types it knows, its own first.
A type it lacks may be described by its speed relative to one it knows (`speeds`, set by
`corral.sim.truth.speeds`; `known_types()` lists both).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

from corral.core.gpu_speeds import GpuSpeed
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
    #: The GPU type this object's own `step_time` answers; "" is the one unnamed type.
    gpu_type: str = ""
    #: Types described by their speed relative to another, {type: (base type, factor)}
    #: (`corral.sim.truth.speeds.with_speeds`); none by default.
    speeds: Mapping[str, tuple[str, float]] = MappingProxyType({})

    def gpu_types(self) -> tuple[str, ...]:
        """The GPU types whose step times this application knows, its own (`gpu_type`) first."""
        return (self.gpu_type,)

    def known_types(self) -> tuple[str, ...]:
        """`gpu_types()` and then the types described by their speed (`speeds`)."""
        own = self.gpu_types()
        return own + tuple(t for t in self.speeds if t not in own)

    def for_type(self, gpu_type: str) -> AppTruth:
        """This application on GPU type `gpu_type` (made once per type and kept).

        "" (the unnamed type of a homogeneous cluster) and the application's own type answer
        with the application itself; a type it does not know raises `InputError` naming the
        application and the types it knows.
        """
        if gpu_type == "" or gpu_type == self.gpu_type:
            return self
        views = self.__dict__.setdefault("_type_views", {})
        view = views.get(gpu_type)
        if view is None:
            described = self.speeds.get(gpu_type)
            if described is not None:
                view = sped_up(self.for_type(described[0]), gpu_type, described[1])
            elif gpu_type not in self.gpu_types():
                raise unknown_type(self.limits.app, gpu_type, self.known_types())
            else:
                view = self._type_view(gpu_type)
            views[gpu_type] = view
        return view

    def _type_view(self, gpu_type: str) -> AppTruth:
        """A new view of this application on `gpu_type`, one of `gpu_types()` (not its own)."""
        raise unknown_type(self.limits.app, gpu_type, self.gpu_types())

    def duration_counts(self, gpus: int, gpus_per_node: int) -> tuple[int, ...]:
        """The placement a duration-based job's trace duration refers to: its GPUs packed onto
        as few nodes as possible (`corral.sim.truth.scaled`)."""
        full, rest = divmod(gpus, gpus_per_node)
        return (gpus_per_node,) * full + ((rest,) if rest else ())

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


def type_label(gpu_type: str) -> str:
    """A GPU type as messages name it ("" is the unnamed type)."""
    return repr(gpu_type) if gpu_type else "'' (the unnamed type)"


def unknown_type(app: str, gpu_type: str, known: tuple[str, ...]) -> Exception:
    from corral.core.errors import InputError

    return InputError(f"application {app!r} has no step times for GPU type {gpu_type!r}; "
                      f"known types: {', '.join(type_label(t) for t in known)}")


def sped_up(base: AppTruth, gpu_type: str, factor: float) -> AppTruth:
    """`base` (an application on a type it knows) on `gpu_type`, whose compute runs `factor`
    times as fast: a step's compute part (step time less sync time) divided by `factor`, its
    synchronisation kept (the catalog's types assume the same of their interconnect,
    `corral.sim.truth.gpu_types.ASSUMPTIONS`)."""
    def step_s(counts: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        step, sync = base.step_time(counts, local_bsz)
        return sync + (step - sync) / factor, sync

    return TypeView(base, gpu_type, step_s)


class TypeView(AppTruth):
    """`app` on another GPU type: `step_s(counts, local_bsz)` answers its step times (memoised
    per view); everything else is the app's, bound without this object's frame."""

    def __init__(self, app: AppTruth, gpu_type: str,
                 step_s: Callable[[tuple[int, ...], float], tuple[float, float]]) -> None:
        self.app = app
        self.gpu_type = gpu_type
        self.speeds = app.speeds
        self.limits = app.limits
        self.epoch_overhead_s = app.epoch_overhead_s
        self.step_time = lru_cache(maxsize=65536)(step_s)  # type: ignore[method-assign]
        self.grad_stats = app.grad_stats  # type: ignore[method-assign]
        self.metric = app.metric  # type: ignore[method-assign]
        self.epoch_progress = app.epoch_progress  # type: ignore[method-assign]

    def step_time(self, counts: tuple[int, ...], local_bsz: float) -> tuple[float, float]:  # replaced per instance
        raise NotImplementedError

    def grad_stats(self, total_bsz: float, epoch: int) -> tuple[float, float]:  # replaced per instance
        return self.app.grad_stats(total_bsz, epoch)

    def epoch_progress(self) -> tuple[float, ...]:  # replaced per instance
        return self.app.epoch_progress()

    def epoch_gains(self, total_bsz: float, epochs: int) -> tuple[float, ...]:
        from corral.sim.truth.replay import epoch_gains  # gains do not depend on the GPU type

        return epoch_gains(self.app, total_bsz, epochs)

    def gain(self, total_bsz: float, epoch: int) -> float:
        return self.app.gain(total_bsz, epoch)

    def gpu_types(self) -> tuple[str, ...]:
        return self.app.gpu_types()

    def for_type(self, gpu_type: str) -> AppTruth:
        return self.app.for_type(gpu_type)

    def duration_counts(self, gpus: int, gpus_per_node: int) -> tuple[int, ...]:
        return self.app.duration_counts(gpus, gpus_per_node)


class Truth(ABC):
    """A set of applications by name."""

    source: str
    #: The GPU types described by their speed (`corral.sim.truth.speeds.with_speeds`).
    described: tuple[GpuSpeed, ...] = ()

    @abstractmethod
    def apps(self) -> Mapping[str, AppTruth]:
        ...

    def app(self, name: str) -> AppTruth:
        from corral.core.errors import InputError

        apps = self.apps()
        if name not in apps:
            raise InputError(f"unknown application {name!r} in {self.source}; known: {', '.join(sorted(apps))}")
        return apps[name]

    def gpu_types(self, app: str) -> tuple[str, ...]:
        """The GPU types `app` knows, its default first ("" = the unnamed type), then those
        described by their speed."""
        return self.app(app).known_types()

    def limits(self) -> dict[str, AppLimits]:
        return {name: a.limits for name, a in self.apps().items()}
