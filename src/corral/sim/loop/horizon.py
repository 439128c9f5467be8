"""How long a simulation may run: until every job finishes, with a guard fitted to the trace.

The guard only stops a run that cannot end (a job never placed, or never progressing): the last
submission plus `GUARD_FACTOR` x (the trace's span + its serial work, every job alone one after
another on its GPUs at the user's batch, one restart each). Any schedule that keeps a job
running while one waits ends well inside it; a run stopped there says so
(`SimResult.stopped`). Serial work is computed once per distinct job configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from corral.core.jobs import JobSpec
from corral.sim.truth.base import Truth
from corral.sim.truth.replay import packed_counts, remaining_at
from corral.sim.truth.scaled import job_app, spec_epochs

#: The guard is this many times (span + serial work) after the last submission.
GUARD_FACTOR = 2.0
DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class Horizon:
    """Simulated time at which a run stops, and how that time was chosen (in words)."""

    limit_s: float
    basis: str

    def stop_note(self, unfinished: int, total: int) -> str:
        """The sentence a run stopped at this horizon reports."""
        return (f"stopped at {self.limit_s / DAY_S:,.1f} simulated days ({self.basis}) "
                f"with {unfinished:,} of {total:,} jobs unfinished")


def serial_work_s(jobs: Sequence[JobSpec], truth: Truth, gpus_per_node: int,
                  restart_s: float, interval_s: float = 0.0,
                  gpu_types: Sequence[str] = ("",)) -> float:
    """Seconds every job takes alone on its requested (packed) GPUs at the user's batch (its
    time outside steps included), summed, with one `restart_s` pause and one wait for a
    scheduling round (`interval_s`) per job. On a cluster of named GPU types (`gpu_types`),
    each job's time on the slowest of them."""
    per_config: dict[tuple, float] = {}
    total = 0.0
    for spec in jobs:
        app = job_app(truth, spec, gpus_per_node)
        epochs = spec_epochs(spec, app)
        key = (spec.app, spec.gpus, spec.batch_size, spec.max_local_bsz, epochs,
               spec.trace_duration_s)
        secs = per_config.get(key)
        if secs is None:
            counts = packed_counts(spec.gpus, gpus_per_node)
            secs = max(remaining_at(app.for_type(t), counts, spec.user_batch(spec.gpus), epochs,
                                    0, 0.0)[0] for t in gpu_types)
            secs += app.epoch_overhead_s * epochs
            per_config[key] = secs
        total += secs + restart_s + interval_s
    return total


def trace_horizon(jobs: Sequence[JobSpec], truth: Truth, gpus_per_node: int,
                  restart_s: float, max_time_s: float | None = None,
                  interval_s: float = 0.0, gpu_types: Sequence[str] = ("",)) -> Horizon:
    """The horizon of a run over `jobs`: `max_time_s` when given, else the trace's guard."""
    if max_time_s is not None:
        return Horizon(float(max_time_s), "the configured limit")
    if not jobs:
        return Horizon(0.0, "no jobs")
    first = min(j.submit_time_s for j in jobs)
    last = max(j.submit_time_s for j in jobs)
    work = serial_work_s(jobs, truth, gpus_per_node, restart_s, interval_s, gpu_types)
    limit = last + GUARD_FACTOR * ((last - first) + work)
    return Horizon(limit, f"the guard: last submission + {GUARD_FACTOR:g} x (trace span "
                          f"{(last - first) / DAY_S:,.1f} d + serial work {work / DAY_S:,.1f} d)")
