"""`corral calibrate`: derive the built-in catalog's compact figures from measured profiles.

For each model it fits the throughput model to every measured (placement, per-GPU batch) step
time, a polynomial of the log noise scale over (training fraction, log batch scale) to the
measured gradient statistics, the mean progress of one epoch, and a metric curve
`a - b / (epoch + c)` at the initial batch size. `fidelity()` reports how far the catalog is from
the measurements it came from.
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path

import numpy as np
from scipy.optimize import curve_fit

from corral.perf.throughput import fit_throughput
from corral.sim.truth.catalog import CATALOG_VERSION, CatalogApp, noise_features
from corral.sim.truth.profiles import ProfileApp, ProfileTruth

NOISE_DEG_EPOCH = 4
NOISE_DEG_BSZ = 2


def _throughput_points(app: ProfileApp) -> tuple[np.ndarray, ...]:
    rows = [(len(k), sum(k), m, step, sync) for k, table in app._placements.items()
            for m, step, sync in table]
    rows += [tuple(p) for p in app._nd_points[:, :5] if p[0] > 4]
    arr = np.array(rows, dtype=float)
    return arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4]


def _fit_noise(app: ProfileApp) -> np.ndarray:
    epochs = app._sqr.shape[1]
    frac = (np.arange(epochs) + 0.5) / epochs
    feats, target = [], []
    for b, bsz in enumerate(app.batch_sizes):
        sqr, var = app._sqr[b], app._var[b]
        ok = (sqr > 0) & (var > 0)
        phi = var[ok] / sqr[ok]
        feats.append(noise_features(frac[ok], np.full(ok.sum(), math.log2(bsz / app.batch_sizes[0])),
                                    NOISE_DEG_EPOCH, NOISE_DEG_BSZ))
        target.append(np.log(phi))
    coef, *_ = np.linalg.lstsq(np.concatenate(feats), np.concatenate(target), rcond=None)
    return coef


def _fit_metric(app: ProfileApp) -> dict | None:
    metric = app._metric[0]
    epochs = np.arange(1, len(metric) + 1, dtype=float)
    if len(metric) < 3:
        return {"a": float(metric[-1]), "b": 0.0, "c": 1.0}
    try:
        (a, b, c), _ = curve_fit(lambda e, a, b, c: a - b / (e + c), epochs, metric,
                                 p0=(metric[-1], 1.0, 1.0), bounds=([-np.inf, -np.inf, 1e-3], np.inf),
                                 maxfev=20000)
    except RuntimeError:
        return None
    return {"a": float(a), "b": float(b), "c": float(c)}


def calibrate(profiles_dir: Path | str) -> dict:
    """The catalog document for every model under `profiles_dir`."""
    truth = ProfileTruth(profiles_dir)
    models = {}
    for name, app in truth.apps().items():
        params = fit_throughput(*_throughput_points(app), prior_driven=False)
        widths = np.diff(np.asarray(app.epoch_progress()), prepend=0.0)
        lim = app.limits
        models[name] = {
            "throughput": params.to_dict(),
            "noise_scale": {"deg_epoch": NOISE_DEG_EPOCH, "deg_bsz": NOISE_DEG_BSZ,
                            "coef": [float(c) for c in _fit_noise(app)]},
            "progress_per_epoch": float(widths.mean()),
            "epochs": lim.epochs, "init_bsz": lim.init_bsz, "max_bsz": lim.max_bsz,
            "min_local_bsz": lim.min_local_bsz, "max_local_bsz": lim.max_local_bsz,
            "lr_rule": lim.lr_rule.value, "adaptive": lim.adaptive, "fixed_bsz": lim.fixed_bsz,
            "max_gpus": lim.max_gpus,
            "metric": _fit_metric(app),
        }
    return {
        "version": CATALOG_VERSION,
        "source": ("Fitted by `corral calibrate` from the Pollux (OSDI'21) artifact's measured "
                   "profiles, petuum/adaptdl osdi21-artifact branch, Apache-2.0"),
        "created": _dt.date.today().isoformat(),
        "models": models,
    }


def fidelity(catalog: dict, profiles_dir: Path | str) -> dict[str, dict[str, float]]:
    """Per model: mean relative error of the catalog's step time and statistical efficiency."""
    truth = ProfileTruth(profiles_dir)
    out = {}
    for name, entry in catalog["models"].items():
        if name not in truth.apps():
            continue
        app, cat = truth.apps()[name], CatalogApp(name, entry)
        step_err = [abs(cat.step_time(k, m)[0] - step) / step
                    for k, table in app._placements.items() for m, step, _ in table]
        eff_err = []
        for e in range(app.limits.epochs):
            for bsz in app.batch_sizes:
                scale = bsz / app.limits.init_bsz
                true_eff = app.gain(bsz, e) / scale
                cat_eff = cat.gain(bsz, e) / scale
                eff_err.append(abs(cat_eff - true_eff) / true_eff)
        widths = np.diff(np.asarray(app.epoch_progress()), prepend=0.0)
        out[name] = {"step_time_mre": float(np.mean(step_err)),
                     "step_time_max_re": float(np.max(step_err)),
                     "efficiency_mre": float(np.mean(eff_err)),
                     "efficiency_max_re": float(np.max(eff_err)),
                     "epoch_progress_mre": float(np.mean(np.abs(widths - widths.mean()) / widths))}
    return out
