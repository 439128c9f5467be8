"""GPU types a truth lacks, described by their speed relative to a type it knows.

`with_speeds` gives every application of a truth the types of `GpuSpeed`s
(`corral.core.gpu_speeds`: `--gpu-speed a100=v100*2.2`, a cluster file's fourth column) whose
base it knows, directly or through another described type; `AppTruth.for_type` then answers
such a type as its base sped up (`corral.sim.truth.base.sped_up`). The built-in catalog also
carries a few of today's types from published figures (`corral/data/gpu_speeds.json`, each
cited there; `builtin_speeds`); a user's description of a type replaces the built-in one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources

from corral.core.errors import InputError
from corral.core.gpu_speeds import GpuSpeed, parse_speed, resolved
from corral.sim.truth.base import Truth, type_label

__all__ = ["builtin_speeds", "with_speeds"]

BUILTIN_FILE = "gpu_speeds.json"


@lru_cache(maxsize=1)
def builtin_speeds() -> tuple[GpuSpeed, ...]:
    """The built-in catalog's described types (`corral/data/gpu_speeds.json`)."""
    where = f"corral/data/{BUILTIN_FILE}"
    doc = json.loads(resources.files("corral.data").joinpath(BUILTIN_FILE).read_text())
    return tuple(parse_speed(t, entry["speed"], where) for t, entry in doc["types"].items())


def with_speeds(truth: Truth, speeds: Sequence[GpuSpeed]) -> Truth:
    """`truth` with the types of `speeds` known to each of its applications whose step times
    cover the base, besides those described before (`speeds` replacing them type by type).
    The truth is changed in place: call it on a truth made for this source, as
    `TruthSource.load` does. InputError, naming where the speed was given, when no application
    knows a base."""
    table = resolved([*truth.described, *speeds])
    apps = truth.apps()
    for s in table.values():
        root = _root(table, s.base)
        if not any(root in app.gpu_types() for app in apps.values()):
            known = sorted({t for app in apps.values() for t in app.gpu_types()} | set(table))
            raise InputError(f"{s.where}: {s}: base type {s.base!r} is unknown to "
                             f"{truth.source}; it knows {', '.join(type_label(t) for t in known)}")
    for app in apps.values():
        own = app.gpu_types()
        app.speeds = {t: (s.base, s.factor) for t, s in table.items()
                      if _root(table, t) in own}
    truth.described = tuple(table.values())
    return truth


def _root(table: dict[str, GpuSpeed], gpu_type: str) -> str:
    """The measured type a described type's chain of bases ends at."""
    while gpu_type in table:
        gpu_type = table[gpu_type].base
    return gpu_type
