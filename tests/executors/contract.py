"""The executor contract tests (corral.executors.base), shared by every executor.

Not collected by itself: a test module subclasses `ExecutorContract` and provides the fixture
`make_executor(data_dir, slots, max_retries)` returning a fresh executor with at least `slots`
slots (see test_local_executor.py). Workers are tests/executors/worker.py (no torch), so the
whole contract runs in seconds.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

from corral.core.cluster import Placement
from corral.core.jobs import BatchConfig
from corral.executors.base import ExecState, Executor, JobLaunch, WorkerPlan
from corral.protocol.env import JobConfig

WORKER = Path(__file__).resolve().parent / "worker.py"
# a bound on each wait, not a speed: tiny jobs, but Ray actors start slowly on a loaded machine
# (30 s ran out under `stress`-like load on both cores)
TIMEOUT_S = 90.0
END = (ExecState.DONE, ExecState.FAILED, ExecState.CANCELLED)


def launch(job_id: str, mode: str, steps: int = 50) -> JobLaunch:
    return JobLaunch(job_id, (sys.executable, str(WORKER), mode, str(steps)), str(WORKER.parent),
                     {"CORRAL_TEST_MARK": "1"}, JobConfig(init_bsz=16, max_bsz=64, max_local_bsz=16))


def held(ex: Executor, job_id: str, steps: int = 60) -> tuple[JobLaunch, Path]:
    """A counting job that counts on past `steps` until the returned hold file is removed, so
    that it cannot finish before the step of a test that needs it running, however slowly a
    loaded machine runs it (tests/executors/worker.py's `held` mode)."""
    hold = ex.files.checkpoint_dir(job_id) / "hold"
    hold.parent.mkdir(parents=True, exist_ok=True)
    hold.touch()
    return launch(job_id, "held", steps), hold


def plan(workers: int, batch: BatchConfig | None = None) -> WorkerPlan:
    return WorkerPlan(Placement(((0, workers),)), batch)


def env_lines(ex: Executor, job_id: str) -> list[dict]:
    path = ex.files.checkpoint_dir(job_id) / "env.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_until(predicate, timeout_s: float = TIMEOUT_S, what: str = "condition"):
    """The predicate's first true value, polled until `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value


class ExecutorContract:
    """Every executor must pass these."""

    @pytest.fixture
    def ex(self, make_executor, tmp_path: Path):
        executor = make_executor(tmp_path / "data", 4, 2)
        yield executor
        executor.shutdown(timeout_s=10)

    def test_offers_its_slots_as_a_cluster(self, ex: Executor) -> None:
        assert ex.cluster().total_gpus >= 4
        assert ex.status("nope").state is ExecState.UNKNOWN

    def test_workers_get_rendezvous_environment_and_finish(self, ex: Executor) -> None:
        ex.place(launch("env", "finish"), plan(3, BatchConfig(4, 1)))
        st = ex.wait_for("env", END, TIMEOUT_S)
        assert st.state is ExecState.DONE and st.exit_codes == (0, 0, 0)
        lines = env_lines(ex, "env")
        assert sorted(int(l["RANK"]) for l in lines) == [0, 1, 2]
        assert {l["WORLD_SIZE"] for l in lines} == {"3"}
        assert len({l["MASTER_PORT"] for l in lines}) == 1
        assert {l["MASTER_ADDR"] for l in lines} == {"127.0.0.1"}
        assert {l["CORRAL_JOB_ID"] for l in lines} == {"env"}
        config = lines[0]["config"]
        assert config["batch"] == [4, 1] and config["init_bsz"] == 16 and config["launch"] == 0
        assert "rank 0 launch 0" in ex.files.read_log("env")

    def test_resize_is_checkpoint_restart_with_the_new_world_size(self, ex: Executor) -> None:
        job, hold = held(ex, "grow")
        ex.place(job, plan(1))
        wait_until(lambda: "starts at" in ex.files.read_log("grow"), what="first launch")
        time.sleep(0.3)
        ex.place(job, plan(2))
        wait_until(lambda: "rank 0 launch 1 starts" in ex.files.read_log("grow"), what="the resize")
        hold.unlink()
        st = ex.wait_for("grow", END, TIMEOUT_S)
        assert st.state is ExecState.DONE and st.launches == 2 and st.crashes == 0
        lines = env_lines(ex, "grow")
        assert [l["WORLD_SIZE"] for l in lines if l["RANK"] == "0"] == ["1", "2"]
        log = ex.files.read_log("grow")
        stopped_at = int(log.split("rank 0 stopped at ")[1].split()[0])
        assert stopped_at > 0
        assert f"rank 0 launch 1 starts at {stopped_at}" in log  # resumed from its checkpoint

    def test_crashed_worker_restarts_from_checkpoint(self, ex: Executor) -> None:
        ex.place(launch("flaky", "crash-once", 5), plan(2))
        st = ex.wait_for("flaky", END, 2 * TIMEOUT_S)  # two launches
        assert st.state is ExecState.DONE and st.crashes == 1 and st.launches == 2

    def test_killed_worker_takes_down_its_peers_and_the_job_restarts(self, ex: Executor) -> None:
        ex.place(launch("kill9", "die-rank1", 40), plan(2))
        st = ex.wait_for("kill9", END, 2 * TIMEOUT_S)  # two launches
        assert st.state is ExecState.DONE and st.crashes == 1
        assert [l["WORLD_SIZE"] for l in env_lines(ex, "kill9")].count("2") == 4
        # the status says how it died (on Ray, through the guard that runs it); rank 0 may
        # have finished its count before the executor looked
        log = ex.files.read_log("kill9")
        assert "worker(s) failed (rank, status): [(1, -9)]" in log or re.search(
            r"launch 0 exited with \[-?\d+, -9\]", log), log

    def test_job_fails_after_bounded_retries(self, ex: Executor) -> None:
        ex.place(launch("bad", "crash"), plan(1))
        st = ex.wait_for("bad", END, 3 * TIMEOUT_S)  # three launches
        assert st.state is ExecState.FAILED
        assert st.crashes == 3 and st.launches == 3  # max_retries=2: the first run + 2 retries
        assert st.message and "\n" not in st.message

    def test_command_that_cannot_start_fails_with_a_message(self, ex: Executor) -> None:
        job = JobLaunch("nocmd", ("/nonexistent/program",), ".", {}, JobConfig())
        ex.place(job, plan(1))
        st = ex.wait_for("nocmd", END, TIMEOUT_S)
        assert st.state is ExecState.FAILED and "/nonexistent/program" in st.message

    def test_stop_preempts_and_a_later_place_resumes(self, ex: Executor) -> None:
        job, hold = held(ex, "pre")
        ex.place(job, plan(2))
        wait_until(lambda: "starts at" in ex.files.read_log("pre"), what="start")
        time.sleep(0.3)
        ex.stop("pre")
        st = ex.wait_for("pre", [ExecState.STOPPED, *END], TIMEOUT_S)
        assert st.state is ExecState.STOPPED and not st.workers
        hold.unlink()
        ex.place(job, plan(1))
        st = ex.wait_for("pre", END, TIMEOUT_S)
        assert st.state is ExecState.DONE and st.launches == 2

    def test_cancel_stops_every_worker(self, ex: Executor) -> None:
        ex.place(launch("cx", "sleep"), plan(2))
        st = ex.wait_for("cx", ExecState.RUNNING, TIMEOUT_S)
        wait_until(lambda: len(ex.status("cx").workers) == 2, what="workers")
        ex.stop("cx", cancel=True)
        st = ex.wait_for("cx", END, TIMEOUT_S)
        assert st.state is ExecState.CANCELLED and not st.workers
        ex.place(launch("cx", "finish"), plan(1))  # a cancelled job stays cancelled
        time.sleep(0.2)
        assert ex.status("cx").state is ExecState.CANCELLED

    def test_a_launch_waits_for_slots_still_held_by_a_stopping_job(self, ex: Executor) -> None:
        total = ex.cluster().total_gpus
        ex.place(launch("hog", "sleep"), plan(total))
        ex.wait_for("hog", ExecState.RUNNING, TIMEOUT_S)
        ex.place(launch("next", "finish"), plan(1))
        time.sleep(0.3)
        assert ex.status("next").state is ExecState.QUEUED
        ex.stop("hog")
        assert ex.wait_for("next", END, TIMEOUT_S).state is ExecState.DONE

    def test_reclaim_stops_workers_left_by_an_earlier_instance(self, ex: Executor, make_executor,
                                                               tmp_path: Path) -> None:
        ex.place(launch("orphan", "sleep"), plan(2))
        wait_until(lambda: len(ex.status("orphan").workers) == 2, what="workers")
        workers = ex.status("orphan").workers
        later = make_executor(tmp_path / "data", 4, 2)
        try:
            later.reclaim("orphan", workers)
            later.reclaim("orphan", ("999999999", "not-a-worker"))  # unknown ids are ignored
        finally:
            later.shutdown(timeout_s=5)
        # the earlier instance sees those workers gone (it counts their exit as a failure)
        wait_until(lambda: not set(workers) & set(ex.status("orphan").workers), 10, "reclaim")
