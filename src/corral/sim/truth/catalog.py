"""Ground truth from the built-in catalog: compact per-model figures fitted from measurements.

The catalog (`corral/data/catalog.json`, made by `corral calibrate PROFILES_DIR -o FILE`) holds,
per model: the throughput-model parameters (Pollux Eq. 12) fitted to every measured step time;
a low-order polynomial of the log gradient-noise scale over (training fraction, log batch
size); the progress one epoch takes; the batch-size limits and LR rule; and a fitted validation
metric curve. It lets `corral simulate` run on a fresh install with no data files, at the cost of
the error `corral calibrate` reports. GPU types: `CatalogTruth`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from corral.core.errors import InputError
from corral.core.jobs import LrRule
from corral.perf.efficiency import GradStats, gain
from corral.perf.throughput import ThroughputParams, grad_time, iteration_time
from corral.sim.truth.base import AppLimits, AppTruth, Truth, TypeView

CATALOG_VERSION = 1


def noise_features(epoch_frac: float | np.ndarray, log_scale: float | np.ndarray,
                   deg_epoch: int, deg_bsz: int) -> np.ndarray:
    """Polynomial features of (training fraction, log2 batch scale) for the noise-scale fit."""
    x = np.atleast_1d(np.asarray(epoch_frac, dtype=float))
    y = np.atleast_1d(np.asarray(log_scale, dtype=float))
    cols = [x ** i * y ** j for i in range(deg_epoch + 1) for j in range(deg_bsz + 1)]
    return np.stack(cols, axis=-1)


def _step_and_sync(params: ThroughputParams, counts: tuple[int, ...], local_bsz: float
                   ) -> tuple[float, float]:
    """(step time, sync time) under `params` on nodes holding `counts` GPUs, no accumulation."""
    step = float(iteration_time(params, len(counts), sum(counts), local_bsz, 0))
    return step, max(0.0, step - float(grad_time(params, local_bsz)))


class CatalogApp(AppTruth):
    """One model's behaviour from its catalog entry."""

    def __init__(self, name: str, entry: Mapping, types: Mapping | None = None) -> None:
        #: {type: ([[per-GPU batch, speed], ...], sync_factor)} from gpu_types.json, if any
        self._types: dict[str, tuple[list[list[float]], float]] = {}
        if types is not None and name in types.get("models", {}):
            for t, points in types["models"][name]["speed"].items():
                self._types[t] = (points, float(types["types"][t]["sync_factor"]))
        try:
            self.name = name
            self.params = ThroughputParams.from_dict(entry["throughput"])
            #: {type: its own throughput model}, from a measured catalog's "type_throughput"
            #: (`corral replay` of a run on named types), in place of a scaled speed
            self._fitted = {str(t): ThroughputParams.from_dict(d)
                            for t, d in (entry.get("type_throughput") or {}).items()}
            noise = entry["noise_scale"]
            self._coef = np.asarray(noise["coef"], dtype=float)
            self._deg = (int(noise["deg_epoch"]), int(noise["deg_bsz"]))
            epochs = int(entry["epochs"])
            width = float(entry["progress_per_epoch"])
            self._boundaries = tuple(width * (e + 1) for e in range(epochs))
            metric = entry.get("metric")
            self._metric_abc = (metric["a"], metric["b"], metric["c"]) if metric else None
            self.epoch_overhead_s = float(entry.get("epoch_overhead_s", 0.0))
            self.limits = AppLimits(
                app=name, init_bsz=int(entry["init_bsz"]), max_bsz=int(entry["max_bsz"]),
                min_local_bsz=int(entry["min_local_bsz"]), max_local_bsz=int(entry["max_local_bsz"]),
                epochs=epochs, lr_rule=LrRule(entry["lr_rule"]),
                adaptive=bool(entry.get("adaptive", True)), fixed_bsz=entry.get("fixed_bsz"),
                max_gpus=entry.get("max_gpus"))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"catalog entry {name!r}: missing or bad field ({exc})") from None
        self.step_time = lru_cache(maxsize=65536)(self._step_time)  # type: ignore[method-assign]
        self.grad_stats = lru_cache(maxsize=65536)(self._grad_stats)  # type: ignore[method-assign]

    def _step_time(self, counts: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        return _step_and_sync(self.params, counts, local_bsz)

    def step_time(self, counts: tuple[int, ...], local_bsz: float) -> tuple[float, float]:  # replaced per instance
        return self._step_time(counts, local_bsz)

    def gpu_types(self) -> tuple[str, ...]:
        return ("", *self._types, *(t for t in self._fitted if t not in self._types))

    def _type_view(self, gpu_type: str) -> AppTruth:
        from dataclasses import replace

        from corral.sim.truth.gpu_types import speed_at

        fitted = self._fitted.get(gpu_type)
        if fitted is not None:
            return TypeView(self, gpu_type, lambda counts, local_bsz: _step_and_sync(
                fitted, counts, local_bsz))
        points, sync_factor = self._types[gpu_type]
        p = self.params
        sync_params = replace(p, alpha_local=p.alpha_local * sync_factor, beta_local=p.beta_local * sync_factor,
                              alpha_node=p.alpha_node * sync_factor, beta_node=p.beta_node * sync_factor)

        def step_s(counts: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
            speed = speed_at(points, float(local_bsz))
            params = replace(sync_params, alpha_grad=p.alpha_grad / speed, beta_grad=p.beta_grad / speed)
            return _step_and_sync(params, counts, local_bsz)

        return TypeView(self, gpu_type, step_s)

    def noise_scale(self, total_bsz: float, epoch: int) -> float:
        """Gradient noise scale in units of M0 batches (var / sqr)."""
        frac = (epoch + 0.5) / len(self._boundaries)
        log_scale = math.log2(max(total_bsz / self.limits.init_bsz, 1.0))
        feats = noise_features(frac, log_scale, *self._deg)[0]
        return float(np.exp(feats @ self._coef))

    def epoch_gains(self, total_bsz: float, epochs: int) -> tuple[float, ...]:
        """`gain(total_bsz, e)` for e < `epochs`, bit for bit, at a fraction of the cost.

        The polynomial features of every epoch are built in one array operation (per epoch
        they dominated a large simulation); each row's dot product is still taken one at a
        time (a matrix product sums in another order), and the rest is element-wise, so every
        figure is `gain`'s to the last bit (tests/sim/test_truth.py checks).
        """
        count = len(self._boundaries)
        frac = (np.arange(epochs, dtype=float) + 0.5) / count
        log_scale = math.log2(max(total_bsz / self.limits.init_bsz, 1.0))
        feats = noise_features(frac, np.full(epochs, log_scale), *self._deg)
        coef = self._coef
        var = np.exp(np.array([row @ coef for row in feats]))  # grad_stats: sqr = 1
        return tuple(gain(GradStats(sqr=1.0, var=v), total_bsz / self.limits.init_bsz)
                     for v in var.tolist())

    def _grad_stats(self, total_bsz: float, epoch: int) -> tuple[float, float]:
        return 1.0, self.noise_scale(total_bsz, epoch)

    def grad_stats(self, total_bsz: float, epoch: int) -> tuple[float, float]:  # replaced per instance
        return self._grad_stats(total_bsz, epoch)

    def epoch_progress(self) -> tuple[float, ...]:
        return self._boundaries

    def metric(self, epoch: int, total_bsz: float) -> float | None:
        if self._metric_abc is None:
            return None
        a, b, c = self._metric_abc
        return float(a - b / (epoch + c))


class CatalogTruth(Truth):
    """Every model of a catalog file (the built-in one by default). The built-in catalog's own
    figures are the unnamed type "" (the T4s they were measured on); `corral/data/gpu_types.json`
    adds `k80`, `p100` and `v100` (`corral.sim.truth.gpu_types`), and `corral/data/gpu_speeds.json`
    `a100`, `h100` and `l4`, described by their speed relative to those
    (`corral.sim.truth.speeds`). A catalog file given with `--catalog` has the unnamed type
    only."""

    def __init__(self, path: Path | str | None = None) -> None:
        if path is None:
            text = resources.files("corral.data").joinpath("catalog.json").read_text()
            self.source = "built-in catalog"
            self._gpu_types = json.loads(resources.files("corral.data").joinpath("gpu_types.json").read_text())
        else:
            p = Path(path)
            if not p.is_file():
                raise InputError(f"catalog {p} not found")
            text = p.read_text()
            self.source = str(p)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{self.source}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        self._load(data)
        if path is None:  # today's types, described by their speed (`corral/data/gpu_speeds.json`)
            from corral.sim.truth.speeds import builtin_speeds, with_speeds

            with_speeds(self, builtin_speeds())

    @classmethod
    def from_document(cls, data: Mapping, source: str) -> CatalogTruth:
        """A truth from a catalog document made in memory (e.g. from a live run's measurements)."""
        truth = cls.__new__(cls)
        truth.source = source
        truth._load(data)
        return truth

    def _load(self, data: Mapping) -> None:
        if not isinstance(data, Mapping) or data.get("version") != CATALOG_VERSION or "models" not in data:
            raise InputError(f"{self.source}: not a corral catalog (version {CATALOG_VERSION})")
        self.origin = data.get("source", "")
        types = getattr(self, "_gpu_types", None)
        self._apps = {name: CatalogApp(name, entry, types) for name, entry in data["models"].items()}

    def apps(self) -> Mapping[str, CatalogApp]:
        return self._apps
