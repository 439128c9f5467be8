"""What a job has learned about itself from what it ran: step-time profile, fitted throughput
model, latest gradient statistics, and the goodput function they make.

The simulator and a training library feed a `JobEstimator` alike (`observe_step` per measured
configuration, `observe_grad`), so scheduler and job see identical models in both worlds. The
throughput model is fitted lazily and kept until the profile changes materially (a new (N, K,
m), or a mean moving > 1%). Fitting follows PolluxAgent (Pollux (OSDI'21) §4.1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from corral.perf.efficiency import NO_STATS, GradStats
from corral.perf.goodput import GoodputFunction
from corral.perf.throughput import ThroughputParams, fit_throughput

__all__ = ["JobEstimator", "STALE_REL_CHANGE", "floored_grad_stats"]

#: A configuration's mean step or sync time moving by more than this fraction of its step
#: time (since the last fit) makes the fitted model stale.
STALE_REL_CHANGE = 0.01
# Floors of reported gradient statistics (as the Pollux artifact: sqr >= 0, var >= 1e-6).
_MIN_SQR = 0.0
_MIN_VAR = 1e-6

_Key = tuple[int, int, int]  # (num_nodes, num_gpus, local_bsz)


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


class JobEstimator:
    """One job's measured profile and the models fitted from it."""

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
        self._configs: dict[_Key, _ConfigStats] = {}
        self._grad: GradStats | None = None
        self._grad_read: tuple[Callable[[float, int], tuple[float, float]], tuple[float, int]] | None = None
        self._params: ThroughputParams | None = None
        self._stale = False
        self._goodput: GoodputFunction | None = None
        self._max_gpus = 0
        #: Number of throughput fits performed (for tests and profiling).
        self.fit_count = 0

    # ------------------------------------------------------------------------ observations

    def observe_step(self, num_nodes: int, num_gpus: int, local_bsz: int, step_time_s: float,
                     sync_time_s: float, count: int = 1) -> None:
        """Record `count` optimizer steps (no accumulation) of mean time `step_time_s`, of
        which `sync_time_s` was gradient synchronisation, at (N, K, m)."""
        if count < 1:
            return
        if num_nodes < 1 or num_gpus < num_nodes or local_bsz < 1:
            raise ValueError(f"bad configuration N={num_nodes} K={num_gpus} m={local_bsz}")
        if not (step_time_s > 0 and np.isfinite(step_time_s)) or not sync_time_s >= 0:
            raise ValueError(f"bad step/sync time {step_time_s}/{sync_time_s}")
        key = (int(num_nodes), int(num_gpus), int(local_bsz))
        cfg = self._configs.get(key)
        if cfg is None:
            self._configs[key] = _ConfigStats(int(count), float(step_time_s), float(sync_time_s))
            self._max_gpus = max(self._max_gpus, key[1])
            self._stale = True
            return
        total = cfg.count + count
        cfg.step_s += (step_time_s - cfg.step_s) * count / total
        cfg.sync_s += (sync_time_s - cfg.sync_s) * count / total
        cfg.count = total
        if not self._stale and cfg.moved():
            self._stale = True

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
            self._goodput = None

    # ---------------------------------------------------------------------------- queries

    @property
    def max_gpus_observed(self) -> int:
        return self._max_gpus

    @property
    def num_configs(self) -> int:
        return len(self._configs)

    @property
    def has_observations(self) -> bool:
        return bool(self._configs)

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
        """True when the next `throughput_params()` call will refit."""
        return self._stale

    def profile(self) -> dict[_Key, tuple[int, float, float]]:
        """{(N, K, m): (steps, mean step time s, mean sync time s)} observed so far."""
        return {k: (c.count, c.step_s, c.sync_s) for k, c in self._configs.items()}

    def throughput_params(self) -> ThroughputParams | None:
        """Fitted throughput model (prior-driven), refitted only if stale; None before data."""
        if not self._configs:
            return None
        if self._stale or self._params is None:
            keys = np.array(list(self._configs), dtype=float)
            cfgs = list(self._configs.values())
            self._params = fit_throughput(
                keys[:, 0], keys[:, 1], keys[:, 2],
                [c.step_s for c in cfgs], [c.sync_s for c in cfgs], prior_driven=True,
                initial=self._params)
            for c in cfgs:
                c.fit_step_s, c.fit_sync_s = c.step_s, c.sync_s
            self._stale = False
            self._goodput = None
            self.fit_count += 1
        return self._params

    def goodput_fn(self) -> GoodputFunction | None:
        """Goodput function from the fitted model and latest statistics; None before data.

        A non-adaptive job keeps its batch at M0 and gets efficiency 1 (Pollux §4.2); an adaptive
        job without gradient statistics yet is also assumed to have efficiency 1.
        """
        params = self.throughput_params()
        if params is None:
            return None
        grad = self._latest_grad()  # first: a newer reading drops the goodput function
        if self._goodput is None:
            stats = (grad or NO_STATS) if self.adaptive else NO_STATS
            self._goodput = GoodputFunction(
                params, stats, self.init_bsz, self.max_bsz if self.adaptive else self.init_bsz,
                self.min_local_bsz, self.max_local_bsz, self.accumulation)
        return self._goodput

    # ---------------------------------------------------------------------- serialisation

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state: limits, profile, gradient statistics and the current fit."""
        grad = self._latest_grad()
        return {
            "init_bsz": self.init_bsz,
            "max_bsz": self.max_bsz,
            "min_local_bsz": self.min_local_bsz,
            "max_local_bsz": self.max_local_bsz,
            "accumulation": self.accumulation,
            "adaptive": self.adaptive,
            "configs": [[n, k, m, c.count, c.step_s, c.sync_s, c.fit_step_s, c.fit_sync_s]
                        for (n, k, m), c in self._configs.items()],
            "grad": None if grad is None else {"sqr": grad.sqr, "var": grad.var},
            "params": None if self._params is None else self._params.to_dict(),
            "stale": self._stale,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobEstimator:
        est = cls(d["init_bsz"], d["max_bsz"], d["min_local_bsz"], d["max_local_bsz"],
                  accumulation=d.get("accumulation", True), adaptive=d.get("adaptive", True))
        for n, k, m, count, step_s, sync_s, fit_step_s, fit_sync_s in d.get("configs", []):
            est._configs[(int(n), int(k), int(m))] = _ConfigStats(
                int(count), float(step_s), float(sync_s),
                None if fit_step_s is None else float(fit_step_s),
                None if fit_sync_s is None else float(fit_sync_s))
            est._max_gpus = max(est._max_gpus, int(k))
        if d.get("grad") is not None:
            est._grad = GradStats(float(d["grad"]["sqr"]), float(d["grad"]["var"]))
        if d.get("params") is not None:
            est._params = ThroughputParams.from_dict(d["params"])
        est._stale = bool(d.get("stale", True)) or (est._params is None and bool(est._configs))
        return est
