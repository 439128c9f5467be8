"""What a job has learned about itself from what it ran: step-time profile, fitted throughput
model, latest gradient statistics, and the goodput function they make.

The simulator and a training library feed a `JobEstimator` alike (`observe_step`,
`observe_grad`), so scheduler and job see identical models in both worlds. The throughput model
is fitted lazily, as PolluxAgent does (Pollux (OSDI'21) §4.1), and kept until the profile
changes materially (a new (N, K, m), or a mean moving > 1%). One model per GPU type (Sia
(SOSP'23) §4), fitted from that type's steps; the gradient statistics are shared by all types.
What policies call per type: `throughput` and `goodput`, remembered until a model changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from corral.core.jobs import BatchConfig
from corral.perf.efficiency import NO_STATS, GradStats
from corral.perf.goodput import GoodputFunction
from corral.perf.throughput import DISTINCT_NODE_COUNTS, ThroughputParams, fit_throughput

__all__ = ["JobEstimator", "STALE_REL_CHANGE", "floored_grad_stats", "SYNC_FIELDS"]

#: A configuration's mean step or sync time moving by more than this fraction of its step
#: time (since the last fit) makes the fitted model stale.
STALE_REL_CHANGE = 0.01
# Floors of reported gradient statistics (as the Pollux artifact: sqr >= 0, var >= 1e-6).
_MIN_SQR = 0.0
_MIN_VAR = 1e-6

_Key = tuple[int, int, int]  # (num_nodes, num_gpus, local_bsz)

#: The throughput parameters a one-GPU profile says nothing about (`bootstrap` borrows them).
SYNC_FIELDS = ("alpha_local", "beta_local", "alpha_node", "beta_node", "gamma")


@lru_cache(maxsize=65536)
def floored_grad_stats(sqr: float, var: float) -> GradStats:
    """Reported gradient statistics as an estimator keeps them (floored, as Pollux's artifact). One
    shared, immutable object per distinct pair: a simulated job reports the same statistics
    of its model at each epoch boundary, millions of times over a production trace."""
    return GradStats(max(float(sqr), _MIN_SQR), max(float(var), _MIN_VAR))


@dataclass(slots=True)
class _ConfigStats:
    """Running means for one (N, K, m) and the means the current fit was made from."""

    count: int
    step_s: float
    sync_s: float
    fit_step_s: float | None = None
    fit_sync_s: float | None = None

    def moved(self) -> bool:
        if self.fit_step_s is None or self.fit_sync_s is None:
            return True
        tol = STALE_REL_CHANGE * self.fit_step_s
        return abs(self.step_s - self.fit_step_s) > tol or abs(self.sync_s - self.fit_sync_s) > tol


class _TypeModel:
    """What a job knows of its speed on one GPU type: the profile, the fit, what it makes."""

    __slots__ = ("configs", "params", "stale", "max_gpus", "borrowed", "max_local_bsz",
                 "effective", "goodput", "best")

    def __init__(self) -> None:
        self.configs: dict[_Key, _ConfigStats] = {}
        self.params: ThroughputParams | None = None  # the fit (also the next fit's warm start)
        self.stale = False
        self.max_gpus = 0
        #: sync parameters borrowed by `bootstrap` ({SYNC_FIELDS: value}), used while
        #: `max_gpus` < 2
        self.borrowed: dict[str, float] | None = None
        self.max_local_bsz: int | None = None  # this type's per-GPU memory limit, if known
        self.effective: ThroughputParams | None = None  # `params` with `borrowed` applied
        self.goodput: GoodputFunction | None = None
        #: {(nodes as the model tells them apart, gpus): (goodput, BatchConfig | None,
        #: samples/s)} of `goodput`, for `goodput` (the function above)
        self.best: dict[tuple[int, int], tuple[float, BatchConfig | None, float]] = {}

    def drop_goodput(self) -> None:
        self.goodput = None
        self.best = {}

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "configs": [[n, k, m, c.count, c.step_s, c.sync_s, c.fit_step_s, c.fit_sync_s]
                        for (n, k, m), c in self.configs.items()],
            "params": None if self.params is None else self.params.to_dict(),
            "stale": self.stale,
        }
        if self.borrowed is not None:
            d["borrowed_sync"] = dict(self.borrowed)
        if self.max_local_bsz is not None:
            d["type_max_local_bsz"] = self.max_local_bsz
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> _TypeModel:
        model = cls()
        for n, k, m, count, step_s, sync_s, fit_step_s, fit_sync_s in d.get("configs", []):
            model.configs[(int(n), int(k), int(m))] = _ConfigStats(
                int(count), float(step_s), float(sync_s),
                None if fit_step_s is None else float(fit_step_s),
                None if fit_sync_s is None else float(fit_sync_s))
            model.max_gpus = max(model.max_gpus, int(k))
        if d.get("params") is not None:
            model.params = ThroughputParams.from_dict(d["params"])
        model.stale = bool(d.get("stale", True)) or (model.params is None and bool(model.configs))
        if d.get("borrowed_sync") is not None:
            model.borrowed = {f: float(d["borrowed_sync"][f]) for f in SYNC_FIELDS}
        if d.get("type_max_local_bsz") is not None:
            model.max_local_bsz = int(d["type_max_local_bsz"])
        return model


class JobEstimator:
    """One job's measured profile and the models fitted from it, one per GPU type. The unnamed type
    "" is the single model of a cluster without types. `observe_step(..., gpu_type=t)` makes t
    the job's current type; every query left without a type (`goodput_fn()`,
    `throughput_params()`, `max_gpus_observed`, `profile()`, ...) answers for it ("" until a step
    of a named type is seen), so a job on one type, named or not, is modelled as before types
    existed. A type the job has not run on is seeded by `bootstrap`."""

    def __init__(self, init_bsz: int, max_bsz: int, min_local_bsz: int, max_local_bsz: int,
                 accumulation: bool = True, adaptive: bool = True) -> None:
        if init_bsz < 1 or max_bsz < 1:
            raise ValueError(f"batch sizes must be >= 1 (init_bsz={init_bsz}, max_bsz={max_bsz})")
        if not 1 <= min_local_bsz <= max_local_bsz:
            raise ValueError(f"need 1 <= min_local_bsz <= max_local_bsz, got "
                             f"{min_local_bsz}, {max_local_bsz}")
        self.init_bsz = int(init_bsz)
        self.max_bsz = int(max_bsz)
        self.min_local_bsz = int(min_local_bsz)
        self.max_local_bsz = int(max_local_bsz)
        self.accumulation = bool(accumulation)
        self.adaptive = bool(adaptive)
        self._models: dict[str, _TypeModel] = {}
        self._type = ""  # the current type: of the latest step observed
        self._grad: GradStats | None = None
        self._grad_read: tuple[Callable[[float, int], tuple[float, float]], tuple[float, int]] | None = None
        #: Number of throughput fits performed, all types together (for tests and profiling).
        self.fit_count = 0

    # ------------------------------------------------------------------------ observations

    def observe_step(self, num_nodes: int, num_gpus: int, local_bsz: int, step_time_s: float,
                     sync_time_s: float, count: int = 1, gpu_type: str = "") -> None:
        """Record `count` optimizer steps (no accumulation) of mean time `step_time_s`, of
        which `sync_time_s` was gradient synchronisation, at (N, K, m) on GPUs of `gpu_type`,
        which becomes the job's current type."""
        if count < 1:
            return
        if num_nodes < 1 or num_gpus < num_nodes or local_bsz < 1:
            raise ValueError(f"bad configuration N={num_nodes} K={num_gpus} m={local_bsz}")
        if not (step_time_s > 0 and np.isfinite(step_time_s)) or not sync_time_s >= 0:
            raise ValueError(f"bad step/sync time {step_time_s}/{sync_time_s}")
        model = self._model_for(gpu_type)
        self._type = gpu_type
        self._add(model, (int(num_nodes), int(num_gpus), int(local_bsz)),
                  float(step_time_s), float(sync_time_s), int(count))

    @staticmethod
    def _add(model: _TypeModel, key: _Key, step_s: float, sync_s: float, count: int) -> None:
        cfg = model.configs.get(key)
        if cfg is None:
            model.configs[key] = _ConfigStats(count, step_s, sync_s)
            model.max_gpus = max(model.max_gpus, key[1])
            model.stale = True
            return
        total = cfg.count + count
        cfg.step_s += (step_s - cfg.step_s) * count / total
        cfg.sync_s += (sync_s - cfg.sync_s) * count / total
        cfg.count = total
        if not model.stale and cfg.moved():
            model.stale = True

    def _model_for(self, gpu_type: str) -> _TypeModel:
        model = self._models.get(gpu_type)
        if model is None:
            if not isinstance(gpu_type, str):
                raise TypeError(f"a GPU type is a str ('' for the unnamed one), got {gpu_type!r}")
            model = self._models[gpu_type] = _TypeModel()
        return model

    def bootstrap(self, gpu_type: str, step_time_s: float, local_bsz: int, *,
                  max_local_bsz: int | None = None) -> None:
        """Seed `gpu_type`'s model from a one-GPU profile: one step of `step_time_s` at per-GPU
        batch `local_bsz`, a one-GPU observation of the type (the fit splits it evenly between
        the constant and the per-sample cost). Sync parameters cannot come from one GPU: they are
        borrowed, unscaled, from the type fitted with the most GPUs (>= 2, `_sync_donor`; the
        all-reduce moves the same bytes whatever computes them) until the type sees multi-GPU
        steps; without one, sync is free (perfect scaling, Pollux §4.1). `max_local_bsz`, when
        given, is the type's per-GPU batch limit (its memory), used in place of the job's. Does
        not change the current type."""
        if not (step_time_s > 0 and np.isfinite(step_time_s)) or local_bsz < 1:
            raise ValueError(f"bad one-GPU profile: step {step_time_s} s at batch {local_bsz}")
        if max_local_bsz is not None and max_local_bsz < self.min_local_bsz:
            raise ValueError(f"max_local_bsz {max_local_bsz} of {gpu_type!r} is below the "
                             f"job's min_local_bsz {self.min_local_bsz}")
        model = self._model_for(gpu_type)
        self._add(model, (1, 1, int(local_bsz)), float(step_time_s), 0.0, 1)
        if max_local_bsz is not None and max_local_bsz != model.max_local_bsz:
            model.max_local_bsz = int(max_local_bsz)
            model.drop_goodput()
        donor = self._sync_donor(exclude=gpu_type)
        borrowed = None
        if donor is not None:
            params = self.throughput_params(donor)
            if params is not None:
                borrowed = {f: float(getattr(params, f)) for f in SYNC_FIELDS}
        if borrowed != model.borrowed:
            model.borrowed = borrowed
            model.effective = None
            model.drop_goodput()

    def bootstrap_missing(self, profiles: Mapping[str, tuple[float, int]]) -> None:
        """`bootstrap` each type of `profiles` ({type: (one-GPU step time, per-GPU batch)})
        that has no model yet: a job's one-GPU profiles, taken before it ran, fill in the types
        it has not run on and leave those it has (or was seeded on) as they are."""
        for gpu_type, (step_s, local_bsz) in profiles.items():
            if not self.has_model(gpu_type):
                self.bootstrap(gpu_type, step_s, local_bsz)

    def _sync_donor(self, exclude: str) -> str | None:
        """The type whose sync parameters a bootstrapped type borrows: fitted with the most
        GPUs (>= 2), then the most configurations, then the first in name order."""
        best: tuple[int, int, str] | None = None
        for t, m in self._models.items():
            if t == exclude or m.max_gpus < 2:
                continue
            rank = (-m.max_gpus, -len(m.configs), t)
            if best is None or rank < best:
                best = rank
        return None if best is None else best[2]

    def observe_grad(self, sqr: float, var: float) -> None:
        """Latest gradient statistics (|g|^2 and variance at batch M0), floored (Pollux artifact).
        Statistics equal to the latest ones (as GradStats compares them) change nothing."""
        self._grad_read = None  # newer than any deferred reading
        self._take_grad(sqr, var)

    def observe_grad_later(self, read: Callable[[float, int], tuple[float, float]],
                           key: tuple[float, int]) -> None:
        """Latest gradient statistics are `read(*key)`, read only when something asks for them
        (`grad_stats`, `goodput_fn`, `to_dict`). Only the latest statistics are kept, so this
        ends as `observe_grad(*read(*key))` would: a simulated job reports its model's statistics
        at every epoch boundary (millions over a production trace), mostly never read."""
        self._grad_read = (read, key)

    def _take_grad(self, sqr: float, var: float) -> None:
        stats = floored_grad_stats(sqr, var)
        old = self._grad
        if old is not stats and (old is None or (old.sqr, old.var) != (stats.sqr, stats.var)):
            self._grad = stats
            for model in self._models.values():
                model.drop_goodput()

    # ---------------------------------------------------------------------------- queries

    @property
    def gpu_type(self) -> str:
        """The current type: of the latest step observed ("" before any)."""
        return self._type

    def gpu_types(self) -> tuple[str, ...]:
        """The types with a model (observed or bootstrapped), in the order first seen."""
        return tuple(t for t, m in self._models.items() if m.configs)

    def has_model(self, gpu_type: str | None = None) -> bool:
        """Whether `gpu_type` (default: the current type) was observed or bootstrapped."""
        model = self._models.get(self._type if gpu_type is None else gpu_type)
        return model is not None and bool(model.configs)

    def max_gpus(self, gpu_type: str | None = None) -> int:
        """The most GPUs of `gpu_type` (default: the current type) a step was seen on."""
        model = self._models.get(self._type if gpu_type is None else gpu_type)
        return 0 if model is None else model.max_gpus

    def local_bsz_limit(self, gpu_type: str | None = None) -> int:
        """The per-GPU batch limit on `gpu_type`: the type's own (`bootstrap`), else the job's."""
        model = self._models.get(self._type if gpu_type is None else gpu_type)
        limit = None if model is None else model.max_local_bsz
        return self.max_local_bsz if limit is None else limit

    @property
    def max_gpus_observed(self) -> int:
        """`max_gpus()` of the current type."""
        return self.max_gpus()

    @property
    def num_configs(self) -> int:
        """Configurations observed on the current type."""
        model = self._models.get(self._type)
        return 0 if model is None else len(model.configs)

    @property
    def has_observations(self) -> bool:
        """Whether the current type has a profile."""
        return self.has_model()

    @property
    def grad_stats(self) -> GradStats | None:
        """Latest gradient statistics, None before any."""
        return self._latest_grad()

    def _latest_grad(self) -> GradStats | None:
        """`_grad`, after taking a deferred reading (`observe_grad_later`) if one is waiting."""
        if self._grad_read is not None:
            read, key = self._grad_read
            self._grad_read = None
            self._take_grad(*read(*key))
        return self._grad

    @property
    def is_stale(self) -> bool:
        """True when the next `throughput_params()` call (current type) will refit."""
        model = self._models.get(self._type)
        return model is not None and model.stale

    def profile(self, gpu_type: str | None = None) -> dict[_Key, tuple[int, float, float]]:
        """{(N, K, m): (steps, mean step time s, mean sync time s)} observed so far on
        `gpu_type` (default: the current type)."""
        model = self._models.get(self._type if gpu_type is None else gpu_type)
        if model is None:
            return {}
        return {k: (c.count, c.step_s, c.sync_s) for k, c in model.configs.items()}

    def throughput_params(self, gpu_type: str | None = None) -> ThroughputParams | None:
        """Fitted throughput model of `gpu_type` (default: the current type; prior-driven,
        borrowed sync parameters applied), refitted only if stale; None before data."""
        model = self._models.get(self._type if gpu_type is None else gpu_type)
        if model is None or not model.configs:
            return None
        if model.stale or model.params is None:
            keys = np.array(list(model.configs), dtype=float)
            cfgs = list(model.configs.values())
            model.params = fit_throughput(
                keys[:, 0], keys[:, 1], keys[:, 2],
                [c.step_s for c in cfgs], [c.sync_s for c in cfgs], prior_driven=True,
                initial=model.params)
            for c in cfgs:
                c.fit_step_s, c.fit_sync_s = c.step_s, c.sync_s
            model.stale = False
            model.effective = None
            model.drop_goodput()
            self.fit_count += 1
        if model.effective is None:
            params = model.params
            if model.borrowed is not None and model.max_gpus < 2:
                params = ThroughputParams(params.alpha_grad, params.beta_grad, **model.borrowed)
            model.effective = params
        return model.effective

    def goodput_fn(self, gpu_type: str | None = None) -> GoodputFunction | None:
        """Goodput function of `gpu_type` (default: the current type) from its fitted model and
        the latest statistics; None before data.

        A non-adaptive job keeps its batch at M0 and gets efficiency 1 (Pollux §4.2); an adaptive
        job without gradient statistics yet is also assumed to have efficiency 1.
        """
        t = self._type if gpu_type is None else gpu_type
        params = self.throughput_params(t)
        if params is None:
            return None
        grad = self._latest_grad()  # first: a newer reading drops the goodput function
        model = self._models[t]
        if model.goodput is None:
            stats = (grad or NO_STATS) if self.adaptive else NO_STATS
            max_local = self.max_local_bsz if model.max_local_bsz is None else model.max_local_bsz
            model.goodput = GoodputFunction(
                params, stats, self.init_bsz, self.max_bsz if self.adaptive else self.init_bsz,
                min(self.min_local_bsz, max_local), max_local, self.accumulation)
            model.best = {}
        return model.goodput

    def _best(self, gpu_type: str, gpus: int, nodes: int
              ) -> tuple[float, BatchConfig | None, float] | None:
        fn = self.goodput_fn(gpu_type)
        if fn is None:
            return None
        gpus, nodes = int(gpus), int(nodes)
        if gpus < 1 or nodes < 1:
            return 0.0, None, 0.0
        if nodes > gpus:
            raise ValueError(f"{gpus} GPUs cannot span {nodes} nodes")
        key = (min(nodes, DISTINCT_NODE_COUNTS - 1), gpus)
        best = self._models[gpu_type].best.get(key)
        if best is None:
            good, local, accum = fn.optimize(nodes, gpus)
            if good > 0:
                speed = float(fn.throughput(nodes, gpus, local, accum))
                best = (float(good), BatchConfig(local, accum), speed)
            else:
                best = (0.0, None, 0.0)
            self._models[gpu_type].best[key] = best
        return best

    def goodput(self, gpu_type: str, gpus: int, nodes: int
                ) -> tuple[float, BatchConfig | None] | None:
        """(Best goodput, its BatchConfig) of this job on `gpus` GPUs of `gpu_type` over
        `nodes` nodes (Pollux Eq. 13 under the type's model): (0.0, None) when no allowed
        batch fits or `gpus` is 0; None when the type has no model. Remembered per type."""
        best = self._best(gpu_type, gpus, nodes)
        return None if best is None else best[:2]

    def throughput(self, gpu_type: str, gpus: int, nodes: int, local_bsz: int | None = None
                   ) -> float | None:
        """Samples per second on `gpus` GPUs of `gpu_type` over `nodes` nodes: at per-GPU batch
        `local_bsz` without accumulation, or (None) at the batch the job would choose there
        (`goodput`'s; 0.0 when none fits). None when the type has no model."""
        if local_bsz is None:
            best = self._best(gpu_type, gpus, nodes)
            return None if best is None else best[2]
        fn = self.goodput_fn(gpu_type)
        if fn is None:
            return None
        if gpus < 1 or nodes < 1:
            return 0.0
        return float(fn.throughput(int(nodes), int(gpus), int(local_bsz), 0))

    # ---------------------------------------------------------------------- serialisation

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state: limits, gradient statistics and the current type's profile and fit
        at the top level (as before types: a reader of one-type documents reads them), its
        name under "gpu_type" and the other types' under "types" (each when there is one)."""
        grad = self._latest_grad()
        current = self._models.get(self._type) or _TypeModel()
        d: dict[str, Any] = {
            "init_bsz": self.init_bsz,
            "max_bsz": self.max_bsz,
            "min_local_bsz": self.min_local_bsz,
            "max_local_bsz": self.max_local_bsz,
            "accumulation": self.accumulation,
            "adaptive": self.adaptive,
            **{k: v for k, v in current.to_dict().items()},
            "grad": None if grad is None else {"sqr": grad.sqr, "var": grad.var},
        }
        if self._type:
            d["gpu_type"] = self._type
        others = {t: m.to_dict() for t, m in self._models.items() if t != self._type}
        if others:
            d["types"] = others
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobEstimator:
        """The estimator of a `to_dict` document, of this or of the one-type format."""
        est = cls(d["init_bsz"], d["max_bsz"], d["min_local_bsz"], d["max_local_bsz"],
                  accumulation=d.get("accumulation", True), adaptive=d.get("adaptive", True))
        est._type = str(d.get("gpu_type", ""))
        current = _TypeModel.from_dict(d)
        if current.configs or current.params is not None or current.borrowed is not None \
                or current.max_local_bsz is not None:
            est._models[est._type] = current
        for t, md in (d.get("types") or {}).items():
            est._models[str(t)] = _TypeModel.from_dict(md)
        if d.get("grad") is not None:
            est._grad = GradStats(float(d["grad"]["sqr"]), float(d["grad"]["var"]))
        return est
