"""The job's report to the scheduler: progress plus fitted models (Pollux (OSDI'21) §4.1).

Rank 0 of a `corral.train` job rewrites one JSON file atomically every report interval, after
each launch's first step, at epoch ends and on stop/finish; the executor reads it (SideCar
(SC'20) §III-B-4's monitoring report). Keys: time (Unix s), state (running|stopped|finished),
launch, world_size, num_nodes, batch [local_bsz, accum_steps], total_bsz, steps, epoch,
progress (scale-invariant iterations), samples, loss (interval mean), lr_scale, metrics [[steps,
epoch, value]], estimator (`JobEstimator.to_dict()`), resumed (checkpoint or null),
first_step_time, gpu_type (the type its steps are, "" unnamed; `gpu_type_name`), device, num_nodes,
pid (rank 0's), events ([{time, kind, message}]). Torch-free.

Both sides hold the report as a `Report` (frozen, typed), so a field renamed on one side cannot
drift from the other: `write_report` is the one writer of the file (the trainer's `Reporter`,
the emulated executor), `Report.read` the one reader. The file is written inside the job, so
whoever reads it trusts nothing in it: `Report.parse` turns it into a `Report` or refuses it
with one line naming the bad field (`ReportError`); keys it does not know are dropped.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from corral.protocol.files import atomic_write_json, read_json

__all__ = ["Report", "ReportError", "Reporter", "write_report", "REPORT_FILE", "gpu_type_name"]

REPORT_FILE = "report.json"


class Reporter:
    """Writes the report when due (rank 0 only); a no-op without a path."""

    def __init__(self, path: str | Path | None, interval_s: float) -> None:
        self.path = Path(path) if path else None
        self.interval_s = interval_s
        self._last = -float("inf")

    def due(self, now: float | None = None) -> bool:
        if self.path is None:
            return False
        return (time.monotonic() if now is None else now) - self._last >= self.interval_s

    def write(self, report: Report) -> None:
        """Replace the report, stamped with the time now, atomically but not durably: it is
        written on the training thread every few seconds, and the next one replaces it anyway,
        so a machine crash may lose the last one (the checkpoints are what a restart resumes
        from), while two fsyncs a report can cost tens of ms on a slow or shared disk."""
        if self.path is None:
            return
        self._last = time.monotonic()
        write_report(self.path, replace(report, time=time.time()), durable=False)


class ReportError(ValueError):
    """A report the service refuses (one line: which field, and what is wrong with it)."""


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError("a number")
    return v


def _integer(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (
            isinstance(v, float) and not v.is_integer()):
        raise TypeError("an integer")
    return int(v)


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError("a string")
    return v


def _mapping(v: Any) -> Mapping[str, Any]:
    if not isinstance(v, dict):
        raise TypeError("an object")
    return v


def _batch(v: Any) -> tuple[int, int]:
    if not isinstance(v, list) or len(v) != 2:
        raise TypeError("[local batch, accumulation steps]")
    return _integer(v[0]), _integer(v[1])


def _metrics(v: Any) -> tuple[tuple[int, int, float], ...]:
    if not isinstance(v, list) or not all(isinstance(m, list) and len(m) == 3 for m in v):
        raise TypeError("a list of [steps, epoch, value]")
    return tuple((_integer(s), _integer(e), float(_number(x))) for s, e, x in v)


def _events(v: Any) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(v, list):
        raise TypeError("a list")
    return tuple(e for e in v if isinstance(e, dict))  # anything else in it is ignored


@dataclass(frozen=True)
class Report:
    """The job's report, typed (see the module docstring for what each field is). Every field
    may be missing from the file (None; metrics and events empty)."""

    time: float | None = None  # Unix s when it was written
    state: str | None = None  # running, stopped or finished
    launch: int | None = None
    world_size: int | None = None
    num_nodes: int | None = None
    device: str | None = None
    gpu_type: str | None = None
    batch: tuple[int, int] | None = None  # (local batch, accumulation steps)
    total_bsz: int | None = None
    steps: int | None = None
    epoch: int | None = None
    progress: float | None = None
    samples: float | None = None
    loss: float | None = None
    lr_scale: float | None = None
    metrics: tuple[tuple[int, int, float], ...] = ()  # (steps, epoch, value)
    #: the trainer's `JobEstimator.to_dict()` (checked by the service, which has perf)
    estimator: Mapping[str, Any] | None = field(default=None, compare=False)
    resumed: Mapping[str, Any] | None = None  # where the launch started from
    first_step_time: float | None = None
    pid: int | None = None  # rank 0's process
    events: tuple[Mapping[str, Any], ...] = ()  # what the trainer noticed (kind, message)

    @classmethod
    def parse(cls, doc: Any) -> Report:
        """The report in `doc` (a JSON object as the job wrote it); ReportError (one line)
        for a field of the wrong type."""
        if not isinstance(doc, dict):
            raise ReportError(f"a report is a JSON object, not {type(doc).__name__}")
        values: dict[str, Any] = {}
        for name, check in _CHECKS.items():
            if doc.get(name) is None:
                continue
            try:
                values[name] = check(doc[name])
            except (TypeError, ValueError, OverflowError) as exc:
                got = " ".join(repr(doc[name])[:60].split())
                raise ReportError(f"report field {name!r} must be {exc}, not {got}") from None
        return cls(**values)

    @classmethod
    def read(cls, path: str | Path) -> Report | None:
        """The latest report in `path`; None when there is none (yet) or it is refused."""
        doc = read_json(path)
        if doc is None:
            return None
        try:
            return cls.parse(doc)
        except ReportError:
            return None

    def to_doc(self) -> dict[str, Any]:
        """The report as JSON (what the service stores and shows)."""
        doc = {f.name: getattr(self, f.name) for f in fields(self)}
        doc["batch"] = list(self.batch) if self.batch else None
        doc["metrics"] = [list(m) for m in self.metrics]
        doc["estimator"] = dict(self.estimator) if self.estimator is not None else None
        doc["resumed"] = dict(self.resumed) if self.resumed is not None else None
        doc["events"] = [dict(e) for e in self.events]
        return doc


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "time": _number, "state": _text, "launch": _integer, "world_size": _integer,
    "num_nodes": _integer, "device": _text, "gpu_type": _text, "batch": _batch,
    "total_bsz": _integer, "steps": _integer, "epoch": _integer, "progress": _number,
    "samples": _number, "loss": _number, "lr_scale": _number, "metrics": _metrics,
    "estimator": _mapping, "resumed": _mapping, "first_step_time": _number, "pid": _integer,
    "events": _events,
}


def write_report(path: str | Path, report: Report, durable: bool = True) -> None:
    """Replace the report file at `path` with `report` (`Report.to_doc`: every field, in the
    order older services read), atomically; `durable`: fsynced too (see `Reporter.write`)."""
    atomic_write_json(path, report.to_doc(), durable=durable)


# Words of a device name that say who makes or brands it, not which GPU it is.
_BRANDS = frozenset({"nvidia", "tesla", "geforce", "quadro", "amd", "radeon", "intel"})
# Words that say which variant of a GPU it is (memory, form factor, MIG slice), not which GPU.
_VARIANT = re.compile(r"\d+(\.\d+)?[gmt]b|sxm\d*|pcie|hbm\d*e?|nvl|mig|\d+g\.\d+gb|"
                      r"generation|edition")
# First words of product lines whose model is several words ("rtx 2080 ti", "titan v").
_LINES = frozenset({"rtx", "gtx", "titan"})
_TYPE_CHARS = re.compile(r"[^a-z0-9_-]")


def gpu_type_name(device_name: str) -> str:
    """The short GPU type name of a device name as `torch.cuda.get_device_name` gives it:
    brand words (NVIDIA, Tesla, GeForce, Quadro) and variant words (memory size, SXM/PCIe,
    HBM, MIG slices) dropped; then the model, one word (`a100`, `v100`, `k80`, `t4`, `h100`,
    `a10g`) or, for the RTX/GTX/TITAN lines, the line and its model words run together
    (`rtx2080ti`, `rtxa6000`, `titanv`). "NVIDIA A100-SXM4-40GB" -> a100, "Tesla V100-SXM2-16GB"
    -> v100, "NVIDIA GeForce RTX 2080 Ti" -> rtx2080ti. A name `corral.core.cluster` accepts,
    in its lower-case key form (letters, digits, - and _, at most 32), "" for an empty name."""
    words = [w for w in re.split(r"[\s_\-/()]+", device_name.lower()) if w]
    words = [w for w in words if w not in _BRANDS and not _VARIANT.fullmatch(w)]
    if not words:
        return ""
    name = "".join(words) if words[0] in _LINES else words[0]
    return _TYPE_CHARS.sub("", name)[:32].lstrip("_-")
