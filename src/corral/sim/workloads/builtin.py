"""The built-in default workload that `corral simulate` runs with no arguments.

40 synthetic jobs at 60 per hour, seed 0, for a 16x4 cluster: the Pollux artifact's mix
without its long yolov3 and imagenet jobs (cifar10 .40, ncf .30, deepspeech2 .15, bert .15),
so every policy simulates it in seconds, at the applications' tuned GPUs (at most 16) and
batches. The rate makes jobs contend for GPUs, so the policies differ as in the papers
(tests/sim/test_workloads.py: fifo's average JCT >= 1.5x pollux's; tiresias-las's differs).
"""

from __future__ import annotations

from collections.abc import Mapping

from corral.sim.truth.base import AppLimits
from corral.sim.workloads.common import Workload
from corral.sim.workloads.synthetic import resolve_mix, synthetic

BUILTIN_MIX: dict[str, float] = {"cifar10": 0.40, "ncf": 0.30, "deepspeech2": 0.15, "bert": 0.15}
BUILTIN_JOBS = 40
BUILTIN_RATE_PER_HOUR = 60.0
BUILTIN_SEED = 0


def builtin_default(apps: Mapping[str, AppLimits], seed: int = BUILTIN_SEED) -> Workload:
    """The default workload (see module docstring); deterministic for a given catalog and
    `seed` (another seed draws other arrivals and models from the same mix)."""
    names, probs = resolve_mix(apps, None, default=BUILTIN_MIX)
    return synthetic(apps, num_jobs=BUILTIN_JOBS, rate_per_hour=BUILTIN_RATE_PER_HOUR,
                     mix=dict(zip(names, probs.tolist())), seed=seed, name="default")
