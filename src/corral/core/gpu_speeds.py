"""A GPU type described by its speed relative to another: `a100=v100*2.2`.

A ground truth knows step times for some GPU types only (the built-in catalog: k80, p100,
v100; measured profiles: the types they were measured on). A type it lacks can be described as
a known type whose compute runs `factor` times as fast (`corral simulate --gpu-speed`, or a
fourth column of a cluster file, `a100-0 8 a100 v100*2.2`); `corral.sim.truth.speeds` turns it
into step times. Here: the value and its parsing, one line per mistake.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from corral.core.cluster import gpu_type_key, gpu_type_problem
from corral.core.errors import InputError

__all__ = ["GpuSpeed", "parse_gpu_speeds", "parse_speed", "resolved"]

EXAMPLE = "e.g. a100=v100*2.2"


@dataclass(frozen=True, slots=True)
class GpuSpeed:
    """GPU type `gpu_type` computes `factor` times as fast as `base` (both type keys)."""

    gpu_type: str
    base: str
    factor: float
    #: Where it was given (`--gpu-speed`, `cluster.txt:3`, the built-in file), for messages.
    where: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.gpu_type}={self.base}*{self.factor:g}"


def parse_speed(gpu_type: str, text: str, where: str) -> GpuSpeed:
    """`BASE*FACTOR` (e.g. `v100*2.2`) for `gpu_type`; InputError naming `where` otherwise."""
    m = re.fullmatch(r"\s*([^*\s]*)\s*\*\s*([^\s]*)\s*", text)
    if not m:
        raise InputError(f"{where}: {gpu_type}={text!r} is not TYPE=BASE*FACTOR ({EXAMPLE})")
    base, number = m.group(1), m.group(2)
    for name in (gpu_type, base):
        if problem := gpu_type_problem(name):
            raise InputError(f"{where}: {problem}")
    try:
        factor = float(number)
    except ValueError:
        factor = math.nan
    if not (math.isfinite(factor) and factor > 0):
        raise InputError(f"{where}: {gpu_type}={base}*{number}: the factor must be a number "
                         f"> 0 ({EXAMPLE})")
    if gpu_type_key(base) == gpu_type_key(gpu_type):
        raise InputError(f"{where}: {gpu_type} is described by itself ({EXAMPLE})")
    return GpuSpeed(gpu_type_key(gpu_type), gpu_type_key(base), factor, where)


def parse_gpu_speeds(text: str, where: str = "--gpu-speed") -> tuple[GpuSpeed, ...]:
    """`TYPE=BASE*FACTOR,...` (e.g. `a100=v100*2.2,h100=a100*3`)."""
    out = []
    for part in text.split(","):
        gpu_type, eq, rest = part.partition("=")
        if not eq:
            raise InputError(f"{where} {text!r}: part {part.strip()!r} is not "
                             f"TYPE=BASE*FACTOR ({EXAMPLE})")
        out.append(parse_speed(gpu_type.strip(), rest, f"{where} {text!r}"))
    return tuple(out)


def resolved(speeds: Iterable[GpuSpeed]) -> dict[str, GpuSpeed]:
    """{type: its speed}, a later description of a type replacing an earlier one (a user's
    over the built-in); InputError when types are described by each other in a circle."""
    out: dict[str, GpuSpeed] = {}
    for s in speeds:
        out[s.gpu_type] = s
    for start in out:
        seen = [start]
        t = out[start].base
        while t in out:
            if t in seen:
                circle = " -> ".join(str(out[x]) for x in seen)
                raise InputError(f"{out[start].where}: GPU speeds go round in a circle ({circle})")
            seen.append(t)
            t = out[t].base
    return out
