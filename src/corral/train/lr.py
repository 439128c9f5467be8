"""Learning-rate scaling rules: `SCALE_LR(M0, M) -> lambda`, applied as lr = lambda * lr0 at
every optimizer step (Pollux Sec. 3 / spec 2.6).

* `adascale`: lambda = r(S) = (var + sqr) / (var/S + sqr), S = M/M0, from the job's gradient
  statistics (AdaScale's gain; spec 2.6 [A]). Before any statistics exist it is S (the NO_STATS
  convention of corral.perf.efficiency: perfect scaling).
* `sqrt`: lambda = sqrt(S) (used for Adam/AdamW in Pollux's evaluation).
* `linear`: lambda = S.

A rule is any callable `(init_bsz, total_bsz, stats) -> float`; `lr_scaler()` accepts a name or
such a callable, so jobs can plug in their own (e.g. LEGW). Torch-free.
"""

from __future__ import annotations

import math
from typing import Callable, Union

from corral.core.errors import InputError
from corral.core.jobs import LrRule
from corral.perf.efficiency import NO_STATS, GradStats, gain

__all__ = ["LrScaler", "adascale", "sqrt_scaling", "linear_scaling", "lr_scaler", "LR_RULES"]

LrScaler = Callable[[int, int, Union[GradStats, None]], float]


def adascale(init_bsz: int, total_bsz: int, stats: GradStats | None) -> float:
    return float(gain(stats or NO_STATS, total_bsz / init_bsz))


def sqrt_scaling(init_bsz: int, total_bsz: int, stats: GradStats | None) -> float:
    return math.sqrt(total_bsz / init_bsz)


def linear_scaling(init_bsz: int, total_bsz: int, stats: GradStats | None) -> float:
    return total_bsz / init_bsz


LR_RULES: dict[str, LrScaler] = {
    LrRule.ADASCALE.value: adascale,
    LrRule.SQRT.value: sqrt_scaling,
    LrRule.LINEAR.value: linear_scaling,
}


def lr_scaler(rule: str | LrRule | LrScaler) -> LrScaler:
    """The scaling function for a rule name (adascale, sqrt, linear) or a callable."""
    if callable(rule):
        return rule
    name = rule.value if isinstance(rule, LrRule) else str(rule)
    try:
        return LR_RULES[name]
    except KeyError:
        raise InputError(f"unknown lr rule {name!r}; known: {', '.join(LR_RULES)}") from None
