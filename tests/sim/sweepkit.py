"""Helpers of the sweep tests: the built-in catalog as the truth, small synthetic workloads, and
a matrix's figures without its timings."""

from __future__ import annotations

import dataclasses

from corral.sim.truth.source import TruthSource
from corral.sim.workloads import Workload, synthetic

SOURCE = TruthSource()  # the built-in catalog


def small_workloads(*shapes: tuple[int, float, int]) -> list[Workload]:
    """One synthetic workload per (jobs, arrivals an hour, seed), named w<jobs>."""
    apps = SOURCE.load().limits()
    return [synthetic(apps, num_jobs=n, rate_per_hour=rate, seed=seed, name=f"w{n}")
            for n, rate, seed in shapes]


def figures(matrix) -> dict:
    """Everything a matrix's runs produced except how long they took."""
    return {p: [{**dataclasses.asdict(r), "wall_s": None} for r in runs]
            for p, runs in matrix.results.items()}
