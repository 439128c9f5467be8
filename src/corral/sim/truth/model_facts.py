"""Per-model facts a profile's files do not carry: restart pause, goodput slowdown, batch cap.

Each data set ran in its publishers' simulator with its own settings: Pollux's charged one 30 s
pause per re-allocation and used the profiles as measured; Sia's charges each model its own
restart time and divides each job's goodput by a per-model slowdown fitted to real runs; Pollux's
capped yolov3 at 8 samples per GPU, Sia's did not. The
figures, each cited, live in `corral/data/model_facts.json`, keyed by the layout the profiles
come in (`POLLUX`, `SIA`), so data runs as its publishers ran it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

POLLUX = "pollux"
SIA = "sia"
LAYOUTS = (POLLUX, SIA)


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """`restart_s`: the checkpoint-restart pause of every placement change, first start
    included; `slowdown`: step times are multiplied by it (goodput divided); `max_local_bsz`:
    the per-GPU batch cap the publishers set below the profiles' largest (None: no cap)."""

    restart_s: float
    slowdown: float = 1.0
    max_local_bsz: int | None = None


def model_facts(layout: str, model: str) -> ModelFacts:
    """The facts of `model` in data of `layout` (the layout's default for a model it does not
    list); ValueError for an unknown layout."""
    table = _table()
    if layout not in table:
        raise ValueError(f"unknown profile layout {layout!r}; known: {', '.join(table)}")
    known, default = table[layout]
    return known.get(model, default)


@cache
def _table() -> dict[str, tuple[dict[str, ModelFacts], ModelFacts]]:
    text = resources.files("corral").joinpath("data/model_facts.json").read_text()
    doc: dict[str, Any] = json.loads(text)
    return {layout: ({m: _facts(f) for m, f in entry["models"].items()}, _facts(entry["default"]))
            for layout, entry in doc["layouts"].items()}


def _facts(entry: dict[str, Any]) -> ModelFacts:
    restart, slowdown = float(entry["restart_s"]), float(entry["slowdown"])
    cap = entry.get("max_local_bsz")
    if restart < 0 or slowdown <= 0 or (cap is not None and int(cap) < 1):
        raise ValueError(f"model facts need restart_s >= 0, slowdown > 0 and max_local_bsz >= 1, "
                         f"got {entry}")
    return ModelFacts(restart, slowdown, None if cap is None else int(cap))
