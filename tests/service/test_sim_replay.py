"""The sim-to-real replay's arithmetic on a hand-made run record: the restart pause, the time
outside steps per epoch and the simulated JCT, each computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.core.errors import InputError
from corral.perf.estimator import JobEstimator
from corral.service.jobs import LiveJob, LiveStatus
from corral.service.run_record import read_run
from corral.sim.measured_run import MeasuredRun, measured_catalog, replay, restart_delay_s
from corral.service.store import Store
from corral.service.submission import Submission

ORIGIN = 1000.0
STEP_S = 0.01


def _report(steps: int, epoch: int, state: str, estimator: JobEstimator) -> dict:
    return {"state": state, "launch": 0, "world_size": 1, "batch": [32, 0], "total_bsz": 32,
            "steps": steps, "epoch": epoch, "progress": float(steps), "samples": 32 * steps,
            "estimator": estimator.to_dict(), "first_step_time": ORIGIN + 3.0, "time": steps}


def _record(tmp_path: Path, finished: bool = True, settings: bool = True) -> Path:
    """One fixed-batch job on 1 of 2 slots under fifo (interval 1 s): submitted at 0.5 s,
    placed at 1.0 s, first step at 3.0 s, 2 epochs of 45 steps of 10 ms, last report at 5.0 s,
    exited at 6.0 s."""
    store = Store(tmp_path / "state.db")
    store.set_meta("origin", repr(ORIGIN))
    if settings:
        store.set_meta("run", json.dumps({"policy": "fifo", "params": {}, "interval_s": 1.0,
                                          "nodes": [["n0", 2]]}))
    sub = Submission(command=["python", "train.py"], batch_size=32).checked(2)
    doc = store.add_job(lambda job_id: LiveJob(job_id, sub, sub.spec(job_id, 0.5)).to_doc())
    est = JobEstimator(32, 32, 32, 32, adaptive=False)
    for _ in range(5):
        est.observe_step(1, 1, 32, STEP_S, 0.0)
    store.add_assignment(1.0, doc["id"], "n0:1", 1, None)
    store.add_telemetry(3.0, doc["id"], _report(1, 0, "running", est))
    last = _report(90, 2, "finished", est)
    store.add_telemetry(5.0, doc["id"], last)
    job = LiveJob.from_doc(doc)
    job.report = last
    if finished:
        job.status, job.finish_s = LiveStatus.DONE, 6.0
    store.save_job(job.to_doc())
    store.close()
    return tmp_path


def test_restart_pause_and_time_outside_steps_are_measured(tmp_path):
    run = MeasuredRun.from_record(read_run(_record(tmp_path)))
    assert restart_delay_s(run) == pytest.approx(2.0)  # placed 1.0 s, first step 3.0 s
    entry = measured_catalog(run)["models"]["job-1"]
    assert entry["epochs"] == 2 and entry["progress_per_epoch"] == pytest.approx(45.0)
    # (5.0 - 3.0 s for 89 steps of 10 ms) + (6.0 - 5.0 s exiting), over 2 epochs
    assert entry["epoch_overhead_s"] == pytest.approx((2.0 - 89 * STEP_S + 1.0) / 2, rel=0.02)


def test_the_replay_predicts_the_jct_of_the_record(tmp_path):
    rows, delay = replay(MeasuredRun.from_record(read_run(_record(tmp_path))))
    (row,) = rows
    overhead = (2.0 - 89 * STEP_S + 1.0) / 2
    # placed at the 1 s round, 2 s pause, then per epoch 45 steps and the time outside them
    expected = 1.0 + delay + 2 * (45 * STEP_S + overhead) - 0.5
    assert row.real_jct_s == pytest.approx(5.5)
    assert row.sim_jct_s == pytest.approx(expected, rel=0.02)
    assert abs(row.error) < 0.02


def test_a_run_without_what_the_replay_needs_is_refused_in_one_line(tmp_path):
    with pytest.raises(InputError, match="state.db missing"):
        MeasuredRun.from_record(read_run(tmp_path / "nowhere"))
    with pytest.raises(InputError, match="no job finished training"):
        MeasuredRun.from_record(read_run(_record(tmp_path / "a", finished=False)))
    with pytest.raises(InputError, match="settings were not recorded"):
        MeasuredRun.from_record(read_run(_record(tmp_path / "b", settings=False)))
