"""What the service logs as it shuts down (corral.service.server._shutdown)."""

from __future__ import annotations

import logging

from corral.policies import create_policy
from corral.service.jobs import LiveJob
from corral.service.loop import ControlLoop
from corral.service.server import _shutdown
from corral.service.submission import Submission


def _submit(store, name: str, gpus: int) -> None:
    sub = Submission(command=["python", f"{name}.py"], gpus=gpus, min_gpus=gpus).checked(4)
    store.add_job(lambda job_id: LiveJob(job_id, sub, sub.spec(job_id, 0.0)).record())


def test_shutdown_logs_the_active_jobs_and_that_their_workers_were_asked_to_stop(
        store, fake_executor, caplog) -> None:
    loop = ControlLoop(store, fake_executor, create_policy("fifo"), interval_s=1)
    for name, gpus in (("a", 2), ("b", 2), ("c", 1)):  # c waits: 4 GPUs
        _submit(store, name, gpus)
    loop.tick()
    with caplog.at_level(logging.INFO, logger="corral.service"):
        _shutdown(loop, fake_executor, 30)
    lines = [r.getMessage() for r in caplog.records if r.name == "corral.service"]
    assert lines[0] == (
        "shutting down with 3 active job(s): 2 placed on 4 GPU(s) (job-1, job-2): their "
        "workers are asked to checkpoint and stop (up to 30 s); 1 queued; the next corral "
        "serve on this data directory requeues every active job and resumes it from its "
        "checkpoint")
    assert lines[1].startswith("shut down in ") and len(lines) == 2
    assert ("shutdown", "") in fake_executor.calls


def test_shutdown_without_a_loop_or_jobs_says_so(store, fake_executor, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="corral.service"):
        _shutdown(None, fake_executor, 5)
        _shutdown(ControlLoop(store, fake_executor, create_policy("fifo")), fake_executor, 5)
    lines = [r.getMessage() for r in caplog.records if r.name == "corral.service"]
    assert lines[0] == "shutting down before the control loop started: no job was scheduled"
    assert lines[2] == ("shutting down with 0 active job(s): none placed: no worker to stop; "
                        "0 queued; the next corral serve on this data directory requeues every "
                        "active job and resumes it from its checkpoint")
