"""Per-model facts a profile's files do not carry: restart pause and goodput slowdown.

Each data set ran in its publishers' simulator with its own settings: Pollux's charged one 30 s
pause per re-allocation and used the profiles as measured; Sia's charges each model its own
restart time and divides each job's goodput by a per-model slowdown fitted to real runs. The
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
    included; `slowdown`: step times are multiplied by it (goodput divided)."""

    restart_s: float
    slowdown: float = 1.0


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
    if restart < 0 or slowdown <= 0:
        raise ValueError(f"model facts need restart_s >= 0 and slowdown > 0, got {entry}")
    return ModelFacts(restart, slowdown)
