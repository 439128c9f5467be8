"""One-GPU profiles of each model on each GPU type, learned from the jobs the service ran.

Sia (SOSP'23) §4 seeds a new job's estimator with its one-GPU step time on every GPU type. The
emulated executor measures it as the simulator does (`Runtime.profile`); a real executor
cannot without running the job. What the service can do is remember: every job of a model
(`JobSpec.app`) that ran on a type leaves its measured one-GPU step time there (its fitted
throughput model at one GPU and the job's first per-GPU batch), and the next job of that
model starts with it on every type some job of the model ran on, as if profiled there. A
type no job of the model ran on is learned by running, as before. Kept in the store's meta
table, so a restarted service remembers; never shown through the API (it says nothing of
whose jobs ran).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping

from corral.core.cluster import Cluster
from corral.core.jobs import JobSpec
from corral.perf.estimator import JobEstimator
from corral.perf.throughput import iteration_time
from corral.service.store import Store

__all__ = ["TypeHistory", "one_gpu_step_s"]

log = logging.getLogger("corral.service")

_META_KEY = "type_history"


def one_gpu_step_s(estimator: JobEstimator, gpu_type: str, local_bsz: int) -> float | None:
    """The step time on one GPU of `gpu_type` at `local_bsz` that the job's fitted model of the
    type gives (measured, not seeded: None when the job never ran a step there)."""
    params = estimator.throughput_params(gpu_type)
    if params is None:
        return None
    step = float(iteration_time(params, 1, 1, local_bsz, 0))
    return step if step > 0 and math.isfinite(step) else None


class TypeHistory:
    """{model: {GPU type: (one-GPU step time s, per-GPU batch)}}, kept in a store's meta table
    (`store.meta` / `store.set_meta`); see the module docstring."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._known: dict[str, dict[str, tuple[float, int]]] = {}
        raw = store.meta(_META_KEY)
        if raw:
            try:
                doc = json.loads(raw)
                self._known = {str(app): {str(t): (float(s), int(m)) for t, (s, m) in per.items()}
                               for app, per in doc.items()}
            except (ValueError, TypeError, AttributeError) as exc:
                log.warning("the stored GPU-type history is unreadable (%s): starting afresh", exc)

    def profile(self, spec: JobSpec, cluster: Cluster) -> dict[str, tuple[float, int]]:
        """What earlier jobs of `spec`'s model measured on each type of `cluster` it may run on
        (`Cluster.types_for`)."""
        known = self._known.get(spec.app, {})
        return {t: known[t] for t in cluster.types_for(spec) if t in known}

    def learn(self, spec: JobSpec, estimator: JobEstimator,
              seeded: Mapping[str, tuple[float, int]] | None = None) -> list[str]:
        """Take in what a job of `spec.app` measured on each type it ran on (not the types it
        was only seeded on, `seeded`, unless it also ran there); returns the types learned
        anew (saved at once)."""
        local = spec.one_gpu_local_bsz()
        seeded = seeded or {}
        per = self._known.setdefault(spec.app, {})
        new, changed = [], False
        for t in estimator.gpu_types():
            steps = estimator.profile(t)
            if t in seeded and set(steps) <= {(1, 1, seeded[t][1])} and all(
                    count <= 1 for count, _, _ in steps.values()):
                continue  # only the seed (one step's worth): nothing measured there
            step = one_gpu_step_s(estimator, t, local)
            if step is None:
                continue
            if t not in per:
                new.append(t)
            if per.get(t) != (step, local):
                per[t] = (step, local)
                changed = True
        if changed:
            self._store.set_meta(_META_KEY, json.dumps(
                {app: {t: list(v) for t, v in p.items()} for app, p in self._known.items()}))
        return new
