"""A corral.train job for executor tests, and the wait for one of its launches to train.

The job (tests/train/tiny_job.py) is long by construction: an epoch count no test reaches, so
every wait is for a state it reaches while training; tests cancel it at the end.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.core.cluster import Placement
from corral.executors.base import Executor, JobLaunch, WorkerPlan
from corral.executors.resize import ResizeDeadlines
from corral.protocol.env import JobConfig
from corral.protocol.report import Report

TINY_JOB = Path(__file__).resolve().parents[1] / "train" / "tiny_job.py"
#: A wait's bound: a hang guard, several times a wait at a load average of 20 (a grow's new
#: worker was ready after 30 s at 13, about a minute at 20).
TIMEOUT_S = 240.0
#: The tiny job's regroup timeout (CORRAL_REGROUP_TIMEOUT_S; also its new process group's for
#: every collective after): as long as torch's default (120 s), not the trainer's 30 s.
REGROUP_TIMEOUT_S = 120.0
#: In-place deadlines for executors that resize the tiny job: each past any wait of a test
#: (TIMEOUT_S), and the regroup's above REGROUP_TIMEOUT_S, so a test that checks an in-place
#: resize on a loaded machine waits for it rather than taking the time fallback (which
#: checkpoint-restarts: correct on a starved machine, but not the path the test checks).
PATIENT = ResizeDeadlines(ready_s=600.0, switch_s=600.0, pid_s=600.0)
#: tiny() arguments for a test that keeps a job training while it waits for other workers to
#: start (their imports take seconds of CPU): at most ~50 steps a second instead of flat out
LEAVE_CPU = ("--step-pause", "0.02")
#: the job imports the corral these tests run (a checkout run with PYTHONPATH=src: Ray's
#: workers get no environment of the test's, and the job sandbox reads only what it names)
_SAME_CORRAL = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}


def tiny(job_id: str, *extra: str, early_init: bool | None = None) -> JobLaunch:
    """The tiny trainer at a fixed batch of 16, with `extra` arguments and a regroup timeout
    of REGROUP_TIMEOUT_S."""
    env = {**_SAME_CORRAL, "CORRAL_REGROUP_TIMEOUT_S": f"{REGROUP_TIMEOUT_S:g}"}
    return JobLaunch(job_id, (sys.executable, str(TINY_JOB), "--epochs", "1000000", *extra),
                     str(TINY_JOB.parent), env=env,
                     config=JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16),
                     early_init=early_init)


def on_node0(workers: int) -> WorkerPlan:
    return WorkerPlan(Placement(((0, workers),)))


def wait(predicate: Callable[[], Any], what: str, timeout_s: float = TIMEOUT_S) -> Any:
    """`predicate()` once it is true; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def trains_on(ex: Executor, job_id: str, launch: int, world: int, after_steps: int = 0,
              timeout_s: float = TIMEOUT_S) -> Report:
    """The report once launch `launch` of the job trains on `world` workers past `after_steps`
    steps and the executor has taken that worker set as the job's."""
    def ok() -> Report | None:
        r = ex.files.report(job_id)
        return r if (r is not None and r.launch == launch and r.world_size == world
                     and (r.steps or 0) > after_steps
                     and ex.status(job_id).launches == launch + 1) else None
    return wait(ok, f"launch {launch} of {job_id} to train on {world} worker(s)", timeout_s)


def own_hold_file(data_dir: Path, job_id: str = "incoming") -> Path:
    """A `--init-hold-file` path in job `job_id`'s own directory under `data_dir`: the job
    sandbox lets its workers write their `.waiting-r<rank>` markers there, not elsewhere."""
    own = data_dir / "jobs" / job_id
    own.mkdir(parents=True, exist_ok=True)
    return own / "hold"
