"""In-place resize driven by the local executor (corral.executors.resize, ONES §3.3.1): a
corral.train job grows from 2 to 4 workers and shrinks to 1 with its staying workers' processes
kept and its training continuing from the step it was at; a new worker that dies falls back to
checkpoint-restart with nothing lost; a job that is not a corral.train trainer is resized by
checkpoint-restart. Every wait is for a state (a report, a launch), bounded in time; the job is
endless by construction (an epoch count no test reaches) and cancelled at the end."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from trainjobs import (  # noqa: E402  (this folder is on sys.path)
    LEAVE_CPU,
    PATIENT,
    on_node0,
    tiny,
    trains_on,
    wait,
)

from corral.executors.base import ExecState, JobLaunch  # noqa: E402
from corral.executors.local import LocalExecutor  # noqa: E402

WORKER = Path(__file__).resolve().parent / "worker.py"

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]  # a hang guard


@pytest.fixture
def executor(tmp_path: Path):
    ex = LocalExecutor(tmp_path / "data", slots=4, report_interval_s=0.2,
                       checkpoint_interval_s=1.0, stop_timeout_s=30, max_retries=1,
                       resize_deadlines=PATIENT)
    yield ex
    ex.shutdown(timeout_s=30)


def _events(ex: LocalExecutor, job_id: str) -> list[tuple[str, str]]:
    return list(ex.status(job_id).events)


def test_grow_and_shrink_in_place_keep_the_staying_workers(executor: LocalExecutor) -> None:
    ex = executor
    ex.place(tiny("grow", *LEAVE_CPU), on_node0(2))
    first = trains_on(ex, "grow", 0, 2, after_steps=5)
    pids = ex.status("grow").workers
    assert len(pids) == 2

    ex.place(tiny("grow", *LEAVE_CPU), on_node0(4))
    grown = trains_on(ex, "grow", 1, 4, after_steps=first.steps)
    st = ex.status("grow")
    assert st.launches == 2 and st.state is ExecState.RUNNING
    assert st.workers[:2] == pids  # the workers that stayed are the same processes
    assert grown.resumed["in_place"] == 1 and grown.resumed["checkpoint"] is None
    assert grown.resumed["steps"] >= first.steps  # continues, not from a checkpoint
    (resized,) = [d for k, d in _events(ex, "grow") if k == "resized"]
    assert "in place from 2 to 4" in resized
    found = re.search(r"in ([0-9.]+) s .* ready after ([0-9.]+) s", resized)
    took, ready = float(found.group(1)), float(found.group(2))
    assert 0 < ready <= took  # the new workers' start, which the old workers trained through

    ex.place(tiny("grow", *LEAVE_CPU), on_node0(1))
    shrunk = trains_on(ex, "grow", 2, 1, after_steps=grown.steps)
    st = ex.status("grow")
    assert st.workers == pids[:1] and st.launches == 3
    assert shrunk.resumed["in_place"] == 2
    assert ex.pool.held("grow") == [ex.pool.held("grow")[0]]  # the leavers' slots are free
    assert len(ex.pool.free()) == 3
    log = ex.files.read_log("grow")
    assert "resized in place from 2 to 4 workers" in log
    assert "resized in place from 4 to 1 workers" in log
    assert not any(k == "resize-fallback" for k, _ in _events(ex, "grow"))

    ex.stop("grow", cancel=True)
    ex.wait_for("grow", ExecState.CANCELLED, 60)


def test_a_new_worker_that_dies_falls_back_to_checkpoint_restart(executor: LocalExecutor) -> None:
    ex = executor
    ex.place(tiny("fall", *LEAVE_CPU), on_node0(2))
    first = trains_on(ex, "fall", 0, 2, after_steps=5)
    ex.place(tiny("fall", *LEAVE_CPU), on_node0(3))
    job = ex._jobs["fall"]  # white-box: the resize under way and its new worker
    joiner = wait(lambda: job.resize is not None and job.resize.joiners and job.resize.joiners[0],
                   "the new worker to start")
    joiner.kill()
    after = trains_on(ex, "fall", 1, 3, after_steps=first.steps)
    assert after.resumed["checkpoint"] is not None  # restarted from a checkpoint
    assert after.resumed["steps"] >= first.steps  # nothing before the resize is lost
    events = _events(ex, "fall")
    assert any(k == "resize-fallback" and "checkpoint-restart instead" in d for k, d in events)
    assert ex.status("fall").crashes == 0  # a fallback is no crash
    ex.stop("fall", cancel=True)
    ex.wait_for("fall", ExecState.CANCELLED, 60)


def test_a_command_that_is_not_a_trainer_is_resized_by_checkpoint_restart(
        executor: LocalExecutor, tmp_path: Path) -> None:
    ex = executor
    job = JobLaunch("plain", (sys.executable, str(WORKER), "count", "100000"), str(WORKER.parent))  # not above the data dir
    ex.place(job, on_node0(1))
    first = ex.wait_for("plain", ExecState.RUNNING, 30).workers
    wait(lambda: ex.status("plain").workers, "the worker to run")
    ex.place(job, on_node0(2))
    st = wait(lambda: (s := ex.status("plain")).launches == 2 and len(s.workers) == 2 and s,
               "the restart on 2 workers")
    assert st.workers[0] not in first  # a new process: checkpoint-restart
    assert "resizing in place" not in ex.files.read_log("plain")
    ex.stop("plain", cancel=True)
    ex.wait_for("plain", ExecState.CANCELLED, 60)
