"""A finished live run's record, read from the service's store, for the simulator to replay
(`corral.sim.analysis.measured_run`; `corral replay` joins the two).

The record is plain data - the run's settings and, for every job that trained to the end under
corral.train, its spec, finish time, last report's progress, epochs and estimator, its stored
reports, the placement decisions made for it and its resizes (mechanism
and pauses), and every other job with why it was left out (`left_out`: (id, reason)) - so the
service needs nothing of the simulator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corral.core.errors import InputError
from corral.service.jobs import LiveJob, LiveStatus
from corral.service.store import Store

__all__ = ["read_run"]


def read_run(data_dir: Path | str) -> dict[str, Any]:
    """The run's record; InputError when there is no run or no job that finished training."""
    path = Path(data_dir) / "state.db"
    if not path.is_file():
        raise InputError(f"{data_dir}: no corral service state here (state.db missing)")
    store = Store(path)
    try:
        settings = store.meta("run")
        if settings is None:
            raise InputError(f"{path}: the run's settings were not recorded (a service older "
                             "than `corral replay`)")
        jobs, left_out = [], []
        for doc in store.jobs():
            job = LiveJob.from_doc(doc)
            estimator = job.report.estimator if job.report else None
            if job.status is not LiveStatus.DONE or not estimator:
                # only jobs that trained to the end under corral.train can replay
                left_out.append((job.id, _why_left_out(job)))
                continue
            jobs.append({"id": job.id, "spec": job.spec, "finish_s": job.finish_s,
                         "progress": job.progress, "epochs": job.epoch, "estimator": estimator,
                         "resizes": job.resizes, "telemetry": store.telemetry(job.id),
                         "assignments": store.assignments(job.id)})
    finally:
        store.close()
    if not jobs:
        raise InputError(f"{path}: no job finished training with corral.train reports")
    return {**json.loads(settings), "jobs": jobs, "left_out": left_out}


def _why_left_out(job: LiveJob) -> str:
    """Why a job of the run cannot be replayed, in a few words."""
    if job.status.active:
        return f"not finished ({job.status.value})"
    if job.status is not LiveStatus.DONE:
        return job.status.value  # failed, cancelled
    return "finished without corral.train reports"
