"""What a comparison shows, in words: the closing lines of `corral simulate` and the report.

`findings(summary_doc)` reads the per-policy means of a summary.json document and says which
policy had the shortest average JCT and by how much against the baseline (`fifo` when it ran,
else the slowest), the best tail (p99), the shortest queueing, the fairest (lowest worst-case
finish-time fairness) and the makespan, and when the policies barely differ, that they do and
why that usually is (a lightly loaded cluster). Oracle policies (`srtf`, `optimus-oracle`, ...)
are marked: they know what no real scheduler knows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from corral.core.errors import UnknownPolicyError
from corral.core.policy import policy_class

__all__ = ["findings"]

#: Relative difference in average JCT under which the policies are said to barely differ.
CLOSE = 0.05


def _label(policy: str) -> str:
    try:
        return f"{policy} (oracle)" if policy_class(policy).promises.oracle else policy
    except UnknownPolicyError:
        return policy


def _best(means: Mapping[str, Mapping[str, Any]], key: str,
          shown: Callable[[float], str]) -> tuple[list[str], str] | None:
    """The policies with the lowest `key` as `shown` prints it (a tie at the shown precision is
    a tie), and that value; None when no policy has it."""
    values = [(p, m[key]) for p, m in means.items() if m.get(key) is not None]
    if not values:
        return None
    low = shown(min(v for _, v in values))
    return [p for p, v in values if shown(v) == low], low


def _shown(unit: str) -> Callable[[float], str]:
    """How a figure prints: whole numbers with `unit` (seconds), else two decimals."""
    return (lambda v: f"{v:,.0f}{unit}") if unit else (lambda v: f"{v:.2f}")


def _names(policies: list[str]) -> str:
    labels = [_label(p) for p in policies]
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def findings(summary: Mapping[str, Any]) -> list[str]:
    """Sentences saying what the table of `summary` (a summary.json document) shows."""
    means = {p: doc.get("mean") or {} for p, doc in (summary.get("policies") or {}).items()}
    jct = {p: m["avg_jct_s"] for p, m in means.items() if m.get("avg_jct_s")}
    if len(jct) < 2:
        return [] if not jct else [f"Only {_label(next(iter(jct)))} ran: nothing to compare."]
    best, best_jct = min(jct.items(), key=lambda pv: pv[1])
    base = "fifo" if "fifo" in jct and best != "fifo" else max(jct, key=lambda p: jct[p])
    spread = (max(jct.values()) - best_jct) / best_jct
    lines = []
    if spread < CLOSE:
        util = [m["gpu_util"] for m in means.values() if m.get("gpu_util") is not None]
        lines.append(f"The policies barely differ: average JCTs within {spread:.0%} of each "
                     f"other" + (f", with the GPUs {max(util):.0%} busy at most: with this "
                                 "little contention every policy runs most jobs at once."
                                 if util else "."))
        return lines
    lines.append(f"{_label(best)} has the shortest average JCT: {best_jct:,.0f} s, "
                 f"{jct[base] / best_jct:.1f}x shorter than {_label(base)} ({jct[base]:,.0f} s).")
    for p in jct:
        if p not in (best, base):
            lines.append(f"{_label(p)}: {jct[p]:,.0f} s, {jct[base] / jct[p]:.2f}x "
                         f"{_label(base)}'s average JCT.")
    for key, what, unit in (("p99_jct_s", "the shortest tail (p99 JCT)", " s"),
                            ("avg_queue_s", "the least queueing (mean wait before the first "
                             "start)", " s"),
                            ("ftf_max", "the fairest worst case (largest finish-time "
                             "fairness rho; 1 = a fair 1/N share)", ""),
                            ("makespan_s", "the shortest makespan", " s")):
        top = _best(means, key, _shown(unit))
        if top is None:
            continue
        winners, value = top
        if len(winners) == 1:
            lines.append(f"{_label(winners[0])} has {what}: {value}.")
        elif len(winners) < sum(1 for m in means.values() if m.get(key) is not None):
            lines.append(f"{_names(winners)} tie for {what}: {value}.")
        else:
            lines.append(f"Every policy ties for {what}: {value}.")
    return lines
