"""Learning-rate scaling rules: `SCALE_LR(M0, M) -> lambda`, applied as lr = lambda * lr0 at
every optimizer step (Pollux (OSDI'21) §3, §2.2).

* `adascale`: lambda = r(S) = (var + sqr) / (var/S + sqr), S = M/M0 (AdaScale's gain); S before
  any statistics exist (corral.perf.efficiency's NO_STATS: perfect scaling).
* `sqrt`: lambda = sqrt(S) (Adam/AdamW in Pollux's evaluation). `linear`: lambda = S.

A rule is any callable `(init_bsz, total_bsz, stats) -> float`; `lr_scaler()` accepts a name or
such a callable (e.g. LEGW). Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from corral.core.errors import InputError
from corral.core.jobs import LrRule
from corral.perf.efficiency import NO_STATS, GradStats, gain

__all__ = ["LrScaler", "LrScaling", "adascale", "sqrt_scaling", "linear_scaling", "lr_scaler",
           "LR_RULES", "DEFAULT_MAX_LR_SCALE", "DEFAULT_BACKOFF", "MIN_BACKOFF"]

LrScaler = Callable[[int, int, GradStats | None], float]


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


#: Largest factor the learning rate is ever scaled by, unless the job says otherwise.
DEFAULT_MAX_LR_SCALE = 8.0
#: A rising scale grows by at most this fraction per step (decreases apply at once).
DEFAULT_MAX_RISE_PER_STEP = 0.02
#: Each divergence restore multiplies the learning rate by this (cumulatively)...
DEFAULT_BACKOFF = 0.5
#: ...down to this multiple of the job's own learning rate.
MIN_BACKOFF = 1.0 / 16


class LrScaling:
    """The learning-rate factor of each step: the job's rule, bounded and rate-limited, and
    backed off after a divergence.

    A sudden jump of the factor can throw a momentum optimizer off, so it stays within
    [1/max_scale, max_scale] and rises by at most `max_rise` per step (falls at once); without
    statistics the AdaScale factor does not rise. Restoring after a divergence would replay the
    same blow-up, so `back_off` multiplies later rates by `backoff` (down to 1/16) and restarts the
    ramp. `scale` is the rule's bounded, ramped factor (what AdaScale progress counts); `factor` =
    scale x backoff is what the optimizer uses. Checkpointed.
    """

    def __init__(self, rule: str | LrRule | LrScaler, max_scale: float = DEFAULT_MAX_LR_SCALE,
                 max_rise: float = DEFAULT_MAX_RISE_PER_STEP,
                 backoff: float = DEFAULT_BACKOFF) -> None:
        if max_scale < 1 or max_rise <= 0 or not 0 < backoff <= 1:
            raise InputError("max_lr_scale must be >= 1, the rise per step > 0 and the back-off "
                             "in (0, 1]")
        self.rule = lr_scaler(rule)
        self.max_scale = float(max_scale)
        self.max_rise = float(max_rise)
        self.backoff_factor = float(backoff)
        self.scale = 1.0
        self.backoff = 1.0  # product of the back-offs of the divergences so far

    @property
    def factor(self) -> float:
        """The learning-rate factor the optimizer step uses: scale x backoff."""
        return self.scale * self.backoff

    def target(self, init_bsz: int, total_bsz: int, stats: GradStats | None) -> float:
        """The rule's factor within the bounds (what the ramp moves toward)."""
        raw = float(self.rule(init_bsz, total_bsz, stats))
        return min(max(raw, 1.0 / self.max_scale), self.max_scale)

    def step(self, init_bsz: int, total_bsz: int, stats: GradStats | None) -> float:
        """The factor for the next optimizer step (`factor`)."""
        target = self.target(init_bsz, total_bsz, stats)
        if stats is None and self.rule is adascale:
            target = min(target, self.scale)
        self.scale = min(target, self.scale * (1.0 + self.max_rise))
        return self.factor

    def reset(self) -> None:
        """Back to factor 1 of the rule (the back-off stays)."""
        self.scale = 1.0

    def back_off(self) -> None:
        """After a divergence: lower the learning rate and restart the ramp from 1."""
        self.backoff = max(self.backoff * self.backoff_factor, MIN_BACKOFF)
        self.scale = 1.0

    def state_dict(self) -> dict[str, float]:
        return {"scale": self.scale, "backoff": self.backoff}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.scale = float(state.get("scale", 1.0))
        self.backoff = float(state.get("backoff", 1.0))
