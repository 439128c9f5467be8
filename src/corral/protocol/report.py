"""The job's report to the scheduler: progress plus fitted models (Pollux (OSDI'21) §4.1).

Rank 0 of a `corral.train` job rewrites one JSON file atomically every report interval, after
each launch's first step, at epoch ends and on stop/finish; the executor reads it (SideCar
(SC'20) §III-B-4's monitoring report). Keys: time (Unix s), state (running|stopped|finished),
launch, world_size, num_nodes, batch [local_bsz, accum_steps], total_bsz, steps, epoch,
progress (scale-invariant iterations), samples, loss (interval mean), lr_scale, metrics [[steps,
epoch, value]], estimator (`JobEstimator.to_dict()`), resumed (checkpoint or null),
first_step_time, gpu_type (the type its steps are, "" unnamed; `gpu_type_name`). Torch-free.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from corral.protocol.files import atomic_write_json, read_json

__all__ = ["Reporter", "read_report", "REPORT_FILE", "gpu_type_name"]

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

    def write(self, doc: dict[str, Any]) -> None:
        """Replace the report atomically but not durably: it is written on the training
        thread every few seconds, and the next one replaces it anyway, so a machine crash
        may lose the last one (the checkpoints are what a restart resumes from), while two
        fsyncs a report can cost tens of ms on a slow or shared disk."""
        if self.path is None:
            return
        self._last = time.monotonic()
        atomic_write_json(self.path, {"time": time.time(), **doc}, durable=False)


def read_report(path: str | Path) -> dict[str, Any] | None:
    """The latest report in `path`, or None when there is none (yet)."""
    doc = read_json(path)
    return doc if isinstance(doc, dict) else None


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
