"""Per-queue figures of runs under queues (`corral simulate --queues/--quotas`): the CLI's
table and the rows report.html shows (`corral.sim.analysis.queue_metrics` computes them)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rich.table import Table

from corral.report.tables import Col, fitted_table

MISSING = "-"


def fmt_seconds(value: float | None) -> str:
    return MISSING if value is None else f"{value:.0f} s"


def _ratio(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}"


def _hours(value: float | None) -> str:
    return MISSING if value is None else f"{value:.1f}"


def _count(value: Any) -> str:
    return MISSING if value is None else str(value)


#: (header, key of `queue_summary`, format), in table order.
QUEUE_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("jobs", "jobs", _count),
    ("finished", "finished", _count),
    ("quota", "quota_gpus", _count),
    ("avg JCT", "avg_jct_s", fmt_seconds),
    ("avg queueing", "avg_queueing_s", fmt_seconds),
    ("GPU-h received", "gpu_hours", _hours),
    ("GPU-h guaranteed", "guaranteed_gpu_hours", _hours),
    ("received/guaranteed", "received_vs_guaranteed", _ratio),
    ("longest starved", "longest_starved_s", fmt_seconds),
    ("FTF mean", "ftf_mean", _ratio),
    ("FTF max", "ftf_max", _ratio),
)
QUEUE_HEADERS: tuple[str, ...] = ("policy", "workload", "queue", *(h for h, _, _ in QUEUE_COLUMNS))


def queue_rows(runs: Iterable[tuple[str, str, Mapping[str, Mapping[str, Any]]]]) -> list[list[str]]:
    """One row of strings per (policy, workload, queue), from `queue_summary` dicts."""
    return [[policy, workload, queue, *(fmt(figures.get(key)) for _, key, fmt in QUEUE_COLUMNS)]
            for policy, workload, per_queue in runs for queue, figures in per_queue.items()]


#: The order in which `queue_table` adds columns while they fit (rank 0: always shown).
_RANKS = {"policy": 0, "queue": 0, "avg JCT": 0, "longest starved": 0, "received/guaranteed": 1,
          "FTF max": 2, "quota": 3, "avg queueing": 4, "GPU-h received": 5,
          "GPU-h guaranteed": 6, "FTF mean": 7, "jobs": 8, "finished": 9, "workload": 10}


def queue_table(runs: Iterable[tuple[str, str, Mapping[str, Mapping[str, Any]]]],
                width: int | None = None) -> Table:
    """The per-queue table `corral simulate --queues` prints ("longest starved": the longest
    stretch a queue waited below its quota while another queue borrowed), with the columns
    that fit in `width` (None: all), the rest named in its caption."""
    cols = [Col(h, rank=_RANKS[h], justify="left" if h in ("policy", "workload", "queue")
                else "right") for h in QUEUE_HEADERS]
    return fitted_table(cols, queue_rows(runs), width, title="per queue")[0]
