"""Generate a synthetic workload: Poisson arrivals, applications drawn from a mix.

Inter-arrival gaps are exponential with mean `3600 / rate_per_hour` s (the first job at 0).
Each job's application is drawn from `mix` (default `POLLUX_MIX`), its GPU count uniformly
from `gpus_choices` (default `default_gpu_choices`, the artifact's tuned counts) and its batch
from `tuned_config`; all from one `numpy.random.default_rng(seed)`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from corral.core.errors import InputError
from corral.sim.truth.base import AppLimits
from corral.sim.workloads.common import Workload, default_gpu_choices, make_job, tuned_config

#: Job mix of the Pollux artifact's eight workloads.
POLLUX_MIX: dict[str, float] = {
    "cifar10": 0.39, "ncf": 0.39, "deepspeech2": 0.09, "bert": 0.07, "yolov3": 0.05,
    "imagenet": 0.02,
}


def resolve_mix(apps: Mapping[str, AppLimits], mix: Mapping[str, float] | None,
                default: Mapping[str, float] = POLLUX_MIX) -> tuple[list[str], np.ndarray]:
    """(application names, probabilities) of a mix. A given mix must name catalog applications
    with non-negative weights; the default mix is restricted to the catalog's applications
    (uniform over the catalog when it shares none)."""
    if not apps:
        raise InputError("synthetic workload: the application catalog is empty")
    if mix is None:
        chosen = {a: w for a, w in default.items() if a in apps} or {a: 1.0 for a in apps}
    else:
        unknown = [a for a in mix if a not in apps]
        if unknown:
            raise InputError(f"synthetic workload: unknown application(s) {', '.join(unknown)} in "
                             f"the mix; known: {', '.join(sorted(apps))}")
        chosen = dict(mix)
    names = list(chosen)
    weights = np.array([float(chosen[a]) for a in names])
    if not np.all(np.isfinite(weights)) or np.any(weights < 0) or weights.sum() <= 0:
        raise InputError(f"synthetic workload: mix weights must be non-negative with a positive "
                         f"sum, got {dict(chosen)}")
    return names, weights / weights.sum()


def synthetic(apps: Mapping[str, AppLimits], *, num_jobs: int, rate_per_hour: float,
              mix: Mapping[str, float] | None = None, seed: int = 0,
              gpus_choices: Mapping[str, Sequence[int]] | None = None,
              name: str | None = None) -> Workload:
    """`num_jobs` jobs arriving as a Poisson process at `rate_per_hour` (see module docstring).

    `gpus_choices` overrides the GPU counts drawn for the applications it names.
    """
    if isinstance(num_jobs, bool) or not isinstance(num_jobs, (int, np.integer)) or num_jobs < 1:
        raise InputError(f"synthetic workload: num_jobs must be a whole number >= 1, got {num_jobs!r}")
    if not (isinstance(rate_per_hour, (int, float)) and math.isfinite(rate_per_hour)
            and rate_per_hour > 0):
        raise InputError(f"synthetic workload: rate_per_hour must be > 0, got {rate_per_hour!r}")
    names, probs = resolve_mix(apps, mix)
    choices: dict[str, tuple[int, ...]] = {}
    for app in names:
        given = (gpus_choices or {}).get(app)
        if given is None:
            choices[app] = default_gpu_choices(apps[app])
            continue
        picked = tuple(int(g) for g in given)
        if not picked or any(g < 1 for g in picked):
            raise InputError(f"synthetic workload: GPU choices for {app} must be counts >= 1, "
                             f"got {list(given)}")
        choices[app] = picked

    rng = np.random.default_rng(seed)
    gaps = rng.exponential(3600.0 / float(rate_per_hour), size=int(num_jobs))
    times = np.cumsum(gaps) - gaps[0]
    drawn = rng.choice(len(names), size=int(num_jobs), p=probs)
    picks = rng.random(int(num_jobs))
    jobs = []
    for k, (t, a, u) in enumerate(zip(times.tolist(), drawn.tolist(), picks.tolist())):
        app = names[a]
        options = choices[app]
        gpus, batch = tuned_config(apps[app], options[min(int(u * len(options)), len(options) - 1)])
        jobs.append(make_job(f"{app}-{k}", t, app, apps[app], gpus, batch))
    mix_text = ", ".join(f"{a} {p:.2f}" for a, p in zip(names, probs))
    return Workload(
        name or f"synthetic-{num_jobs}-seed{seed}", jobs,
        source=f"synthetic: {num_jobs} jobs, {rate_per_hour:g}/h, seed {seed}, mix {mix_text}")
