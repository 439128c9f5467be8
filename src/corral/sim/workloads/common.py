"""Shared pieces of the workload loaders: the `Workload` type, building a `JobSpec` from an
application's limits, the "tuned" user configuration, the GPU-time size classes and CSV reading
that reports bad input as one-line `InputError`s naming the file and row.

Row numbers are 1-based and count the header as row 1 (they are the file's line numbers).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from corral.core.errors import InputError
from corral.core.jobs import JobSpec
from corral.sim.truth.base import AppLimits
from corral.sim.truth.source import TruthSource


@dataclass(frozen=True)
class Workload:
    """A named list of submitted jobs, sorted by submit time, with unique job names.

    `source` says where the jobs came from (file, generator and its seed). `trace_gpu_s` holds,
    by job name, the GPU-seconds a job used in its source trace (Philly, Tiresias) when the source
    says; it is informational only (the simulator derives run time from the ground truth).
    """

    name: str
    jobs: list[JobSpec]
    source: str
    trace_gpu_s: Mapping[str, float] | None = None
    #: How each column of the source file was read, {column: words}, when a loader says.
    columns: Mapping[str, str] | None = None
    #: The ground truth the jobs need, when the source brings its own (a Gavel `.trace`: its
    #: throughput table); None: the truth the run was given.
    truth: TruthSource | None = None

    def __post_init__(self) -> None:
        jobs = sorted(self.jobs, key=lambda j: j.submit_time_s)  # stable: ties keep file order
        object.__setattr__(self, "jobs", jobs)
        seen: set[str] = set()
        for job in jobs:
            if job.name in seen:
                raise ValueError(f"workload {self.name}: duplicate job name {job.name!r}")
            seen.add(job.name)

    def __len__(self) -> int:
        return len(self.jobs)


# --- tuned user configuration -------------------------------------------------------------------

#: GPU counts of the well-tuned configurations in the Pollux artifact's workloads (OSDI'21 §5.1:
#: counts reaching 50-80 % of ideal scaling). Used to draw GPU counts for generated jobs.
TUNED_GPUS: dict[str, tuple[int, ...]] = {
    "bert": (6, 8, 12, 16),
    "cifar10": (6, 8, 12, 16),
    "deepspeech2": (6, 8, 12),
    "imagenet": (24, 32, 48),
    "ncf": (1,),
    "yolov3": (4,),
}


def max_sensible_gpus(limits: AppLimits) -> int:
    """Most GPUs a job of this application can use: each must get >= min_local_bsz of the
    largest total batch it may run at (`fixed_bsz` for a fixed-batch application)."""
    top = limits.fixed_bsz if limits.fixed_bsz is not None else limits.max_bsz
    return max(1, top // max(limits.min_local_bsz, 1))


def default_gpu_choices(limits: AppLimits) -> tuple[int, ...]:
    """Tuned GPU counts for `limits.app`: the artifact's (`TUNED_GPUS`) for the six Pollux
    applications, otherwise 1, 2, 4 and 8 GPUs up to `max_sensible_gpus`."""
    cap = max_sensible_gpus(limits)
    choices = TUNED_GPUS.get(limits.app) or (1, 2, 4, 8)
    return tuple(g for g in choices if g <= cap) or (1,)


def tuned_config(limits: AppLimits, gpus: int) -> tuple[int, int]:
    """A well-tuned user configuration `(gpus, total batch size)` for a job asking for `gpus`.

    GPUs capped at `max_sensible_gpus`; a fixed-batch application (ncf) runs at `fixed_bsz`;
    otherwise M0 times the power of two at or above 2 x gpus, clamped to `[init_bsz, max_bsz]`
    (about two M0 batches per GPU, accumulating past `max_local_bsz`). This reproduces about 95 %
    of the tuned pairs of the Pollux artifact's workloads (OSDI'21 §5.1); it is smaller for bert on
    6-8 GPUs and larger for imagenet, whose tuning reflects statistical efficiency.
    """
    if gpus < 1:
        raise ValueError(f"{limits.app}: gpus must be >= 1, got {gpus}")
    g = min(int(gpus), max_sensible_gpus(limits))
    if limits.fixed_bsz is not None:
        return g, int(limits.fixed_bsz)
    target = limits.init_bsz * (1 << math.ceil(math.log2(2 * g)))
    return g, int(min(max(target, limits.init_bsz), limits.max_bsz))


def make_job(name: str, submit_s: float, app: str, limits: AppLimits, gpus: int,
             batch_size: int, where: str = "") -> JobSpec:
    """A JobSpec for the user configuration (`gpus`, `batch_size`) of an application.

    A fixed-batch application (`limits.fixed_bsz`, e.g. ncf) runs at that total batch under every
    policy: its batch size, M0 and maximum are all `fixed_bsz`. `limits.max_gpus`, when set, caps
    the job's GPUs (`JobSpec.max_gpus`; the Pollux reference ran ncf on one GPU). On one GPU a
    batch above the application's measured M0 trains as two or more micro-batches
    (`JobSpec.one_gpu_split_bsz`, the measured system's rule: ncf's 32768 runs as 2 x 16384).
    """
    init, top = limits.init_bsz, limits.max_bsz
    if limits.fixed_bsz is not None:
        batch_size = init = top = int(limits.fixed_bsz)
    cap: dict[str, Any] = {} if limits.max_gpus is None else {"max_gpus": int(limits.max_gpus)}
    try:
        return JobSpec(
            name=name, submit_time_s=float(submit_s), app=app, gpus=int(gpus),
            batch_size=int(batch_size), init_bsz=int(init), max_bsz=int(top),
            min_local_bsz=limits.min_local_bsz, max_local_bsz=limits.max_local_bsz,
            adaptive=limits.adaptive, lr_rule=limits.lr_rule, epochs=limits.epochs,
            one_gpu_split_bsz=limits.init_bsz,
            **cap)
    except ValueError as exc:
        raise InputError(f"{where or name}: {exc}") from None


# --- size classes -------------------------------------------------------------------------------

#: GPU-hour class bounds and the applications of each class (the Pollux workloads, OSDI'21 §5.1):
#: < 1 GPU-h: cifar10 or ncf; 1-10: deepspeech2 or bert; 10-100: yolov3; >= 100: imagenet.
SIZE_CLASS_BOUNDS_GPU_H: tuple[float, ...] = (1.0, 10.0, 100.0)
SIZE_CLASS_APPS: tuple[tuple[str, ...], ...] = (
    ("cifar10", "ncf"), ("deepspeech2", "bert"), ("yolov3",), ("imagenet",))


def size_class(gpu_s: np.ndarray) -> np.ndarray:
    """Size class index (0 small .. 3 xlarge) of each GPU-time in GPU-seconds."""
    bounds = np.asarray(SIZE_CLASS_BOUNDS_GPU_H) * 3600.0
    return np.searchsorted(bounds, np.asarray(gpu_s, dtype=float), side="right")


def map_size_classes(gpu_s: np.ndarray, apps: Mapping[str, AppLimits], seed: int,
                     where: str) -> list[str]:
    """Pick an application of the GPU-time's size class for each job, uniformly within the class,
    with one seeded uniform draw per job (in input order). Class members missing from the
    catalog are skipped; a class with none in the catalog is an InputError."""
    classes = size_class(gpu_s)
    u = np.random.default_rng(seed).random(len(classes))
    members: list[tuple[str, ...]] = []
    for k, names in enumerate(SIZE_CLASS_APPS):
        present = tuple(a for a in names if a in apps)
        if not present and np.any(classes == k):
            raise InputError(
                f"{where}: jobs of GPU-time class {k} need application {' or '.join(names)}, "
                f"which the catalog lacks; known: {', '.join(sorted(apps))}")
        members.append(present)
    return [members[c][min(int(x * len(members[c])), len(members[c]) - 1)]
            for c, x in zip(classes.tolist(), u.tolist())]


# --- CSV reading --------------------------------------------------------------------------------

@dataclass
class Table:
    """Rows of a CSV file: `rows[i]` came from line `lines[i]`; `col[name]` indexes a column."""

    path: Path
    header: list[str]
    col: dict[str, int]
    rows: list[list[str]]
    lines: list[int]

    def column(self, name: str) -> list[str]:
        i = self.col[name]
        return [r[i] for r in self.rows]

    def error(self, index: int, what: str) -> InputError:
        return InputError(f"{self.path}: row {self.lines[index]}: {what}")


def read_header(path: Path) -> list[str]:
    """The header columns of a CSV file (InputError when missing, unreadable or empty)."""
    _check_file(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            for fields in csv.reader(fh):
                if any(f.strip() for f in fields):
                    return [f.strip() for f in fields]
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text (CSV) file") from None
    except csv.Error as exc:
        raise InputError(f"{path}: not a readable CSV file: {exc}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    raise InputError(f"{path}: file is empty")


def _check_file(path: Path) -> None:
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a CSV file")


def read_table(path: str | Path, required: Sequence[str], kind: str) -> Table:
    """Read a CSV file whose header must contain `required` columns. Blank lines are skipped."""
    path = Path(path)
    _check_file(path)
    line = 0
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            header: list[str] | None = None
            for fields in reader:
                if any(f.strip() for f in fields):
                    header = [f.strip() for f in fields]
                    break
            if header is None:
                raise InputError(f"{path}: file is empty")
            line = reader.line_num
            missing = [c for c in required if c not in header]
            if missing:
                raise InputError(
                    f"{path}: row {line}: missing column(s) {', '.join(missing)} of a {kind} "
                    f"workload (header: {','.join(header)}; needs {','.join(required)})")
            width = len(header)
            rows: list[list[str]] = []
            lines: list[int] = []
            for fields in reader:
                if len(fields) != width:
                    if not any(f.strip() for f in fields):
                        continue  # blank line
                    raise InputError(f"{path}: row {reader.line_num}: expected {width} fields "
                                     f"({','.join(header)}), got {len(fields)}")
                rows.append(fields)
                lines.append(reader.line_num)
            line = reader.line_num
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text (CSV) file") from None
    except csv.Error as exc:
        raise InputError(f"{path}: row {line + 1}: malformed CSV: {exc}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not rows:
        raise InputError(f"{path}: no jobs (the file has a header only)")
    col = {name: i for i, name in reversed(list(enumerate(header)))}
    return Table(path, header, col, rows, lines)


def parse_number(table: Table, index: int, column: str, *, integer: bool = False,
                 minimum: float = 0.0) -> float:
    """Column `column` of row `index` as a finite number >= `minimum` (a whole one if
    `integer`), else an InputError naming the file, row and column."""
    text = table.rows[index][table.col[column]].strip()
    try:
        value = float(text)
    except ValueError:
        raise table.error(index, f"{column} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise table.error(index, f"{column} is not a finite number: {text!r}")
    if integer and value != int(value):
        raise table.error(index, f"{column} must be a whole number, got {text!r}")
    if value < minimum:
        if minimum == 0:
            raise table.error(index, f"{column} must not be negative, got {text!r}")
        raise table.error(index, f"{column} must be >= {minimum:g}, got {text!r}")
    return value


def lookup_app(table: Table, index: int, app: str, apps: Mapping[str, AppLimits]) -> AppLimits:
    """The limits of application `app`, else an InputError listing the known ones."""
    limits = apps.get(app)
    if limits is None:
        raise table.error(index, f"unknown application {app!r}; known: {', '.join(sorted(apps))}")
    return limits


def check_unique(table: Table, index: int, name: str, seen: dict[str, int], what: str) -> None:
    """Record `name` from row `index`; a repeat is an InputError naming both rows."""
    if not name:
        raise table.error(index, f"empty {what}")
    first = seen.get(name)
    if first is not None:
        raise table.error(index, f"duplicate {what} {name!r} (first at row {table.lines[first]})")
    seen[name] = index
