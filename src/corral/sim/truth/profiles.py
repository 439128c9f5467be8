"""Ground truth from measured profiles in the Pollux format (`--profiles DIR`).

Replays a job as the Pollux artifact's simulator did: step times of a listed placement are
interpolated linearly over the per-GPU batch; an unlisted one over (nodes, GPUs, per-GPU
batch) from `placements.csv` plus `scalability.csv` (nodes capped at 16). A model folder may
instead (or as well) hold one such pair per GPU type, `placements-<type>.csv` and
`scalability-<type>.csv` (Sia's layout), each type's step times replayed the same way. Gradient statistics
are interpolated between the two nearest validated batch sizes; epoch boundaries are the
minimum over batch sizes. Decided here: queries outside the measured range are clamped to it,
and a configuration outside the measurements' convex hull takes the nearest measured point.
"""

from __future__ import annotations

import csv
import re
from bisect import bisect_left
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from corral.core.cluster import gpu_type_key, gpu_type_problem
from corral.core.errors import InputError
from corral.core.jobs import LrRule
from corral.sim.truth.base import AppLimits, AppTruth, Truth, TypeView

#: Per-model facts the profile files do not carry (Pollux (OSDI'21) Table 1, §4.2, and the
#: artifact's simulator settings): optimizer LR rule, and the
#: per-GPU cap / fixed batch the reference simulator applied.
APP_FACTS: dict[str, dict] = {
    "bert": {"lr_rule": LrRule.SQRT},
    "cifar10": {"lr_rule": LrRule.ADASCALE},
    "deepspeech2": {"lr_rule": LrRule.ADASCALE},
    "imagenet": {"lr_rule": LrRule.ADASCALE},
    "ncf": {"lr_rule": LrRule.SQRT, "adaptive": False, "fixed_bsz": 32768, "max_gpus": 1},
    "yolov3": {"lr_rule": LrRule.ADASCALE, "max_local_bsz": 8},
}

MAX_INTERP_NODES = 16


def _read_csv(path: Path, columns: list[str]) -> dict[str, np.ndarray]:
    """Read numeric columns of a CSV; InputError names the file and row on bad data."""
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise InputError(f"{path}: empty file")
        header = [h.strip() for h in header]
        missing = [c for c in columns if c not in header]
        if missing:
            raise InputError(f"{path}: missing column(s) {', '.join(missing)}")
        idx = [header.index(c) for c in columns]
        rows: list[list[float]] = []
        for rowno, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            try:
                values = [float(row[i]) for i in idx]
            except (ValueError, IndexError):
                raise InputError(f"{path}:{rowno}: expected numbers in {', '.join(columns)}, got {row}") from None
            if any(not np.isfinite(v) or v < 0 for v in values):
                raise InputError(f"{path}:{rowno}: values must be finite and non-negative, got {row}")
            rows.append(values)
    if not rows:
        raise InputError(f"{path}: no data rows")
    arr = np.array(rows, dtype=float)
    return {c: arr[:, i] for i, c in enumerate(columns)}


def canonical_counts(counts: tuple[int, ...]) -> tuple[int, ...]:
    """The lexicographically smallest rotation of a per-node GPU list (the profiles' key)."""
    return min(counts[i:] + counts[:i] for i in range(len(counts))) if counts else counts


class _StepTable:
    """Step and sync times of one GPU type: a placements file plus a scalability file."""

    def __init__(self, placements: Path | None = None, scalability: Path | None = None) -> None:
        if placements is not None and scalability is not None:
            self._load_placements(placements)
            self._load_scalability(scalability)

    # -- throughput --------------------------------------------------------------------------
    def _load_placements(self, path: Path) -> None:
        if not path.is_file():
            raise InputError(f"{path}: file not found")
        with path.open(newline="") as fh:
            reader = csv.reader(fh)
            header = [h.strip() for h in next(reader, [])]
            need = ["placement", "local_bsz", "step_time", "sync_time"]
            if any(c not in header for c in need):
                raise InputError(f"{path}: expected columns {', '.join(need)}, got {', '.join(header) or 'nothing'}")
            ix = [header.index(c) for c in need]
            table: dict[tuple[int, ...], list[tuple[float, float, float]]] = {}
            for rowno, row in enumerate(reader, start=2):
                if not row:
                    continue
                key = row[ix[0]].strip()
                if not re.fullmatch(r"[1-9]+", key):
                    raise InputError(f"{path}:{rowno}: placement must be digits 1-9, got {key!r}")
                try:
                    m, step, sync = (float(row[i]) for i in ix[1:])
                except (ValueError, IndexError):
                    raise InputError(f"{path}:{rowno}: expected numbers, got {row}") from None
                if m <= 0 or step <= 0 or sync < 0 or sync > step:
                    raise InputError(f"{path}:{rowno}: need local_bsz > 0 and 0 <= sync_time <= step_time")
                table.setdefault(canonical_counts(tuple(int(c) for c in key)), []).append((m, step, sync))
        if not table:
            raise InputError(f"{path}: no data rows")
        self._placements = {k: np.array(sorted(v)) for k, v in table.items()}
        all_m = np.concatenate([v[:, 0] for v in self._placements.values()])
        self._min_local, self._max_local = float(all_m.min()), float(all_m.max())

    def _load_scalability(self, path: Path) -> None:
        cols = _read_csv(path, ["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"])
        groups: dict[tuple[float, float, float], list[tuple[float, float]]] = {}
        for key, rows in self._placements.items():
            for m, step, sync in rows:
                groups.setdefault((len(key), sum(key), m), []).append((step, sync))
        points = [(*k, *np.mean(v, axis=0)) for k, v in groups.items()]
        points += list(zip(cols["num_nodes"], cols["num_replicas"], cols["local_bsz"],
                           cols["step_time"], cols["sync_time"]))
        self._nd_points = np.array(points, dtype=float)
        self._max_gpus = float(self._nd_points[:, 1].max())
        self._interp: tuple[Any, Any] | None = None  # built on first unlisted placement

    def _nd(self, num_nodes: float, num_gpus: float, local_bsz: float) -> tuple[float, float]:
        from scipy.interpolate import LinearNDInterpolator, NearestNDInterpolator

        if self._interp is None:
            xs, ys = self._nd_points[:, :3], self._nd_points[:, 3:]
            self._interp = (LinearNDInterpolator(xs, ys), NearestNDInterpolator(xs, ys))
        q = np.array([[min(num_nodes, MAX_INTERP_NODES), min(num_gpus, self._max_gpus), local_bsz]])
        out = self._interp[0](q)[0]
        if not np.all(np.isfinite(out)):
            out = self._interp[1](q)[0]
        return float(out[0]), float(out[1])

    def _step_time(self, counts: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        m = min(max(float(local_bsz), self._min_local), self._max_local)
        key = canonical_counts(tuple(counts))
        rows = self._placements.get(key)
        if rows is not None:
            mm = min(max(m, rows[0, 0]), rows[-1, 0])
            return float(np.interp(mm, rows[:, 0], rows[:, 1])), float(np.interp(mm, rows[:, 0], rows[:, 2]))
        return self._nd(len(counts), sum(counts), m)



def _typed_files(directory: Path) -> dict[str, tuple[Path, Path]]:
    """{type key: (placements-<type>.csv, scalability-<type>.csv)} of a model folder (the type
    as the file name writes it, `dgx-ext` or `A100-SXM4-80GB`, matched by `gpu_type_key`); a
    placements file without its scalability file (or the reverse), or two files for one type
    in two cases, is an error naming the file."""
    out: dict[str, tuple[Path, Path]] = {}
    for kind, other in (("placements", "scalability"), ("scalability", "placements")):
        for f in sorted(directory.glob(f"{kind}-*.csv")):
            gpu_type = f.stem[len(kind) + 1:]
            if problem := gpu_type_problem(gpu_type):
                raise InputError(f"{f}: {problem} (in the file name)")
            pair = directory / f"{other}-{gpu_type}.csv"
            if not pair.is_file():
                raise InputError(f"{pair}: file not found (needed beside {f.name} for GPU type {gpu_type!r})")
            files = (f, pair) if kind == "placements" else (pair, f)
            key = gpu_type_key(gpu_type)
            if out.get(key, files) != files:
                raise InputError(f"{f}: GPU type {gpu_type!r} also has files "
                                 f"{out[key][0].name} (names match whatever their case)")
            out[key] = files
    return dict(sorted(out.items()))


class ProfileApp(_StepTable, AppTruth):
    """One application's measured behaviour, read from `<dir>/<app>/`.

    Step times per GPU type: `placements-<type>.csv` with `scalability-<type>.csv` (the Sia
    artifact's layout) give type `<type>`; the plain `placements.csv` and `scalability.csv` the
    unnamed type "". The application's own type (`gpu_type`, what `step_time` answers and the
    batch limits come from) is "" when the plain files are there, else the first type by name.
    """

    def __init__(self, directory: Path) -> None:
        self.name = directory.name
        self._typed = _typed_files(directory)
        plain = directory / "placements.csv"
        if plain.is_file() or not self._typed:
            self._load_placements(plain)
            self._load_scalability(directory / "scalability.csv")
        else:
            self.gpu_type = next(iter(self._typed))
            self._load_placements(self._typed[self.gpu_type][0])
            self._load_scalability(self._typed[self.gpu_type][1])
        self._load_validation(directory)
        facts = APP_FACTS.get(self.name, {})
        min_local = int(self._min_local)
        max_local = int(facts.get("max_local_bsz", self._max_local))
        self.limits = AppLimits(
            app=self.name,
            init_bsz=int(self.batch_sizes[0]),
            max_bsz=int(self.batch_sizes[-1]),
            min_local_bsz=min_local,
            max_local_bsz=max_local,
            epochs=len(self._epoch_progress),
            lr_rule=facts.get("lr_rule", LrRule.ADASCALE),
            adaptive=facts.get("adaptive", True),
            fixed_bsz=facts.get("fixed_bsz"),
            max_gpus=facts.get("max_gpus"),
        )
        self.step_time = lru_cache(maxsize=65536)(self._step_time)  # type: ignore[method-assign]

    def step_time(self, counts: tuple[int, ...], local_bsz: float) -> tuple[float, float]:  # replaced per instance
        return self._step_time(counts, local_bsz)

    def gpu_types(self) -> tuple[str, ...]:
        return (self.gpu_type, *(t for t in self._typed if t != self.gpu_type))

    def _type_view(self, gpu_type: str) -> AppTruth:
        return TypeView(self, gpu_type, _StepTable(*self._typed[gpu_type])._step_time)

    # -- statistical efficiency and progress ------------------------------------------------------
    def _load_validation(self, directory: Path) -> None:
        files = sorted(directory.glob("validation-*.csv"), key=lambda p: int(p.stem.split("-")[1]))
        if not files:
            raise InputError(f"{directory}: no validation-<batch size>.csv files")
        cols = [_read_csv(f, ["progress", "iteration", "metric", "grad_sqr", "grad_var"]) for f in files]
        epochs = min(len(c["progress"]) for c in cols)
        self.batch_sizes = np.array([float(f.stem.split("-")[1]) for f in files])
        self._sqr = np.array([c["grad_sqr"][:epochs] for c in cols])  # [batch size, epoch]
        self._var = np.array([c["grad_var"][:epochs] for c in cols])
        self._metric = np.array([c["metric"][:epochs] for c in cols])
        self._epoch_progress = tuple(float(x) for x in np.min([c["progress"][:epochs] for c in cols], axis=0))
        self.validation = cols  # kept for calibration and the convergence predictors' tests

    def _bsz_weights(self, total_bsz: float) -> tuple[int, int, float]:
        bs = self.batch_sizes
        if total_bsz <= bs[0]:
            return 0, 0, 0.0
        if total_bsz >= bs[-1]:
            return len(bs) - 1, len(bs) - 1, 0.0
        hi = bisect_left(bs, total_bsz)
        lo = hi - 1
        return lo, hi, (total_bsz - bs[lo]) / (bs[hi] - bs[lo])

    def grad_stats(self, total_bsz: float, epoch: int) -> tuple[float, float]:
        e = min(max(epoch, 0), self._sqr.shape[1] - 1)
        lo, hi, w = self._bsz_weights(total_bsz)
        sqr = self._sqr[lo, e] * (1 - w) + self._sqr[hi, e] * w
        var = self._var[lo, e] * (1 - w) + self._var[hi, e] * w
        return float(sqr), float(var)

    def epoch_progress(self) -> tuple[float, ...]:
        return self._epoch_progress

    def metric(self, epoch: int, total_bsz: float) -> float | None:
        e = min(max(epoch - 1, 0), self._metric.shape[1] - 1)
        lo, hi, w = self._bsz_weights(total_bsz)
        return float(self._metric[lo, e] * (1 - w) + self._metric[hi, e] * w)


class ProfileTruth(Truth):
    """Every application directory under a profiles root (one folder per model)."""

    def __init__(self, root: Path | str) -> None:
        root = Path(root)
        if not root.is_dir():
            raise InputError(f"profiles directory {root} not found")
        dirs = sorted(p for p in root.iterdir() if p.is_dir() and (
            (p / "placements.csv").is_file() or any(p.glob("placements-*.csv"))))
        if not dirs:
            raise InputError(f"{root}: no <model>/placements.csv (or placements-<type>.csv) profiles found")
        self.source = str(root)
        self._apps = {d.name: ProfileApp(d) for d in dirs}

    def apps(self) -> Mapping[str, ProfileApp]:
        return self._apps
