"""Performance models of a training job: throughput, statistical efficiency, goodput, and the
per-job estimator and batch choice built on them (Pollux, OSDI'21).

Pure numerics (imports only corral.core, numpy and scipy), fed identically by the simulator and
by a real training library.
"""

from corral.perf.agent import choose_batch, initial_batch
from corral.perf.efficiency import NO_STATS, GradStats, efficiency, gain
from corral.perf.estimator import JobEstimator
from corral.perf.goodput import GoodputFunction, SpeedupFunction
from corral.perf.throughput import (
                                    ThroughputParams,
                                    fit_throughput,
                                    grad_time,
                                    iteration_time,
                                    sync_time,
)

__all__ = [
    "GoodputFunction", "GradStats", "JobEstimator", "NO_STATS", "SpeedupFunction",
    "ThroughputParams", "choose_batch", "efficiency", "fit_throughput", "gain", "grad_time",
    "initial_batch", "iteration_time", "sync_time",
]
