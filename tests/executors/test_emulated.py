"""The emulated executor: simulated jobs on the truth, on a clock N times real time, reporting
as corral.train jobs do; and the service's side of it (the `app` field, the clock)."""

from __future__ import annotations

import dataclasses
import threading
import time
import warnings
from pathlib import Path

import pytest

from corral.core.clock import WALL_CLOCK
from corral.core.cluster import Placement
from corral.core.errors import InputError
from corral.core.jobs import Assignment, BatchConfig
from corral.executors import create_executor, create_runtime
from corral.executors.base import ExecState, JobLaunch, WorkerPlan
from corral.executors.emulated.clock import LockstepClock
from corral.executors.emulated.executor import EmulatedClock, EmulatedExecutor
from corral.protocol.report import REPORT_FILE, Report
from corral.sim.loop.job import SimJob
from corral.sim.workloads.common import make_job


@pytest.fixture
def executor(tmp_path: Path):
    ex = EmulatedExecutor(tmp_path, cluster="2x4", time_scale=2000, report_interval_s=30)
    yield ex
    ex.shutdown()


def _spec(ex: EmulatedExecutor, name: str = "a", epochs: int = 3):
    limits = ex.truth.limits()["cifar10"]
    return dataclasses.replace(make_job(name, 0, "cifar10", limits, 4, 512), epochs=epochs)


def _launch(spec) -> JobLaunch:
    return JobLaunch(spec.name, ("emulated",), ".", spec=spec)


def test_a_job_trains_as_its_simulated_twin_and_reports_as_corral_train(executor) -> None:
    spec = _spec(executor)
    placement = Placement.of({0: 4})
    executor.place(_launch(spec), WorkerPlan(placement))
    sim = executor._jobs["a"].sim
    st = executor.wait_for("a", ExecState.DONE, timeout_s=60, poll_s=0.01)
    assert st.launches == 1 and not st.workers
    assert executor._jobs["a"].sim is None  # an ended job's twin is let go
    twin = SimJob(spec, executor.truth.app("cifar10"))
    twin.clock_s = sim.first_start_s
    twin.assign(sim.first_start_s, Assignment(placement), 30.0)  # checkpoint-restart's start
    # trained as the engine trains it: the same batch choices at the same epoch ends (a dry
    # prediction keeps today's batch, which an adaptive job need not: it changed here on an
    # Intel Skylake-X, whose BLAS kernels move the throughput fits' last bits)
    twin.advance(1e9)
    assert sim.finish_s == pytest.approx(twin.finish_s, rel=1e-9)
    report = executor.files.report("a")
    assert report == Report.read(executor.data_dir / "jobs" / "a" / REPORT_FILE)
    assert report.state == "finished" and report.epoch == 3 and report.steps > 0
    assert report.world_size == 4 and report.launch == 0 and report.batch
    assert report.estimator  # the JobEstimator document of what it observed
    # times are on the emulated clock: the first step ended 30 emulated seconds after the start
    assert report.first_step_time - executor.clock.start == pytest.approx(
        sim.first_start_s + 30.0)


def test_a_job_that_ends_while_the_loop_stalls_still_reports_its_first_step(executor) -> None:
    """The executor's loop does not run from the placement until after the job's end (the
    test holds its lock, as a machine that stalls the loop would keep it from running): the
    finished report still says when the first step ended (it said none before)."""
    spec = _spec(executor)
    twin = SimJob(spec, executor.truth.app("cifar10"))
    twin.assign(0.0, Assignment(Placement.of({0: 4})), 30.0)
    twin.advance(1e9)
    with executor._lock:  # (an RLock: place takes it too)
        executor.place(_launch(spec), WorkerPlan(Placement.of({0: 4})))
        start = executor._jobs["a"].sim.first_start_s
        time.sleep((twin.finish_s + 60.0) / executor.time_scale)  # past its end, no pass ran
        assert executor._jobs["a"].state is ExecState.RUNNING
    executor.wait_for("a", ExecState.DONE, timeout_s=60, poll_s=0.01)
    report = executor.files.report("a")
    assert report.state == "finished" and report.first_step_time is not None
    assert report.first_step_time - executor.clock.start == pytest.approx(start + 30.0)


def test_a_trace_job_takes_its_trace_duration_as_in_the_engine(executor) -> None:
    """A duration-based job trains on its model scaled to the trace (`job_app`)."""
    spec = dataclasses.replace(_spec(executor), trace_duration_s=900.0, adaptive=False)
    executor.place(_launch(spec), WorkerPlan(Placement.of({0: 4})))
    sim = executor._jobs["a"].sim
    executor.wait_for("a", ExecState.DONE, timeout_s=60, poll_s=0.01)
    # alone on its GPUs at the user's batch: the trace's 900 s after the 30 s start
    assert sim.finish_s - sim.first_start_s == pytest.approx(930.0, rel=1e-6)


def test_stop_resume_and_cancel(executor) -> None:
    spec = _spec(executor, epochs=50)
    plan = WorkerPlan(Placement.of({0: 4}))
    executor.place(_launch(spec), plan)
    deadline = time.monotonic() + 30
    while (r := executor.files.report("a")) is None or not r.steps:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    executor.stop("a")
    st = executor.status("a")
    assert st.state is ExecState.STOPPED and not st.workers
    stopped = executor.files.report("a")
    assert stopped.state == "stopped" and stopped.steps > 0
    executor.place(_launch(spec), WorkerPlan(Placement.of({1: 2})))
    st = executor.status("a")
    assert st.state is ExecState.RUNNING and st.launches == 2 and len(st.workers) == 2
    while executor.files.report("a").launch != 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    report = executor.files.report("a")
    assert report.resumed["steps"] == stopped.steps and report.world_size == 2
    executor.stop("a", cancel=True)
    assert executor.status("a").state is ExecState.CANCELLED
    assert "launch 1: 2 worker(s)" in executor.files.read_log("a")


def test_a_forgotten_job_leaves_nothing_behind_but_its_log(executor) -> None:
    """The service forgets a job once it stored its end: the executor's memory and its passes
    do not grow with the jobs it ran; a job forgotten while it ran gives its GPUs back."""
    executor.place(_launch(_spec(executor, "a")), WorkerPlan(Placement.of({0: 4})))
    executor.wait_for("a", ExecState.DONE, timeout_s=60, poll_s=0.01)
    executor.place(_launch(_spec(executor, "b", epochs=50)), WorkerPlan(Placement.of({1: 2})))
    assert executor._held == [0, 2]
    executor.forget("a")
    executor.forget("b")
    executor.forget("never-placed")
    assert executor._jobs == {} and executor._held == [0, 0]
    assert executor.status("a").state is ExecState.UNKNOWN and executor.files.report("a") is None
    assert "finished at emulated" in executor.files.read_log("a")


def test_a_decision_handed_over_job_by_job_takes_gpus_before_they_are_given_up(tmp_path) -> None:
    """The service may place a job on GPUs before it stops the job holding them (one
    decision, applied job by job): the books stay right and the pause is the mechanism's."""
    executor = EmulatedExecutor(tmp_path, cluster="2x4", time_scale=1)
    try:
        _job_by_job(executor)
    finally:
        executor.shutdown()


def _job_by_job(executor: EmulatedExecutor) -> None:
    a, b = _spec(executor, "a", epochs=50), _spec(executor, "b", epochs=50)
    executor.place(_launch(b), WorkerPlan(Placement.of({0: 4})))
    executor.place(_launch(a), WorkerPlan(Placement.of({0: 4})))
    assert executor.status("a").state is ExecState.RUNNING
    assert executor._jobs["a"].sim.pause_left_s == pytest.approx(30.0, abs=1.0)
    executor.stop("b")
    assert executor._held == [4, 0] and executor._owed == [0, 0]
    executor.place(_launch(b), WorkerPlan(Placement.of({1: 4})))  # a swap of nodes
    executor.place(_launch(a), WorkerPlan(Placement.of({1: 2})))
    executor.place(_launch(b), WorkerPlan(Placement.of({0: 4})))
    assert executor._held == [4, 2] and executor._owed == [0, 0]


def test_a_placement_that_does_not_fit_is_refused(executor) -> None:
    with pytest.raises(ValueError):
        executor.place(_launch(_spec(executor)), WorkerPlan(Placement.of({0: 8})))


def test_apps_are_checked_against_the_truth(executor) -> None:
    executor.known_apps("cifar10")
    with pytest.raises(InputError, match="needs the job's model"):
        executor.known_apps(None)
    with pytest.raises(InputError, match="unknown app 'nope'.*known: .*cifar10"):
        executor.known_apps("nope")
    spec = dataclasses.replace(_spec(executor, "b"), app="nope")
    executor.place(_launch(spec), WorkerPlan(Placement.of({0: 1})))
    st = executor.status("b")
    assert st.state is ExecState.FAILED and "unknown app" in st.message


def test_the_clock_runs_time_scale_times_real_time() -> None:
    clock = EmulatedClock(500)
    a, real = clock(), time.monotonic()
    time.sleep(0.05)
    gone = time.monotonic() - real
    assert clock() - a == pytest.approx(500 * gone, rel=0.2)
    with pytest.raises(InputError):
        EmulatedClock(0)


def test_a_stopped_clock_reads_the_same_and_catches_up_after() -> None:
    clock = EmulatedClock(1000)
    with clock.stopped():
        a = clock()
        time.sleep(0.02)
        assert clock() == a and clock.elapsed_s() == pytest.approx(a - clock.start, abs=1e-6)
        with clock.stopped():  # re-entered: still stopped
            assert clock() == a
        assert clock() == a
        seen = []
        reader = threading.Thread(target=lambda: seen.append(clock()))
        reader.start()
        reader.join()
        assert seen[0] >= a + 1000 * 0.02  # for the thread that stopped it only
    assert clock() - a >= 1000 * 0.02  # no time was lost


def test_a_decision_takes_no_emulated_time(tmp_path: Path) -> None:
    """A tick of the service (a round: deciding, applying) happens at one emulated instant:
    the job starts at the round's time, however long the policy took in real time."""
    from corral.policies import create_policy
    from corral.service.jobs import LiveJob
    from corral.service.loop import ControlLoop
    from corral.service.store import Store
    from corral.service.submission import Submission

    ex = EmulatedExecutor(tmp_path, cluster="1x4", time_scale=1000)
    store = Store(tmp_path / "state.db")
    policy = create_policy("fifo")
    decide = policy.decide

    def slow(snapshot):
        time.sleep(0.05)  # 50 emulated seconds at 1000x
        return decide(snapshot)

    policy.decide = slow
    loop = ControlLoop(store, ex, policy, interval_s=60, clock=ex.clock)
    try:
        sub = Submission(command=["emulated"], app="cifar10", gpus=2, batch_size=512).checked(4)
        store.add_job(lambda job_id: LiveJob(job_id, sub, sub.spec(job_id, 0.0)).record())
        loop.tick()
        [round_] = loop.recent_rounds
        started = ex._jobs["job-1"].sim.first_start_s + ex.clock.start - loop.origin
        assert started == pytest.approx(round_["time_s"], abs=1e-6)
    finally:
        ex.shutdown()
        store.close()


def _die(executor: EmulatedExecutor) -> None:
    """The service's process dies (SIGKILL): its simulated workers stop where they are,
    nothing is stopped or checkpointed."""
    executor._closing.set()
    executor._thread.join(timeout=5)


def test_a_new_executor_on_the_same_directory_resumes_its_clock_and_each_jobs_training(
        tmp_path: Path) -> None:
    first = EmulatedExecutor(tmp_path, cluster="2x4", time_scale=200, checkpoint_interval_s=60)
    spec = _spec(first, epochs=50)
    first.place(_launch(spec), WorkerPlan(Placement.of({0: 4})))
    deadline = time.monotonic() + 30
    while (first._checkpoints.load("a") or {}).get("steps", 0) == 0:  # a periodic one, saved
        assert time.monotonic() < deadline
        time.sleep(0.01)
    _die(first)
    saved = first._checkpoints.load("a")
    second = EmulatedExecutor(tmp_path, cluster="2x4", time_scale=200, checkpoint_interval_s=60)
    try:
        # one clock: the new one is where the old one would be now (downtime passes on it)
        assert second.clock() == pytest.approx(first.clock(), abs=200 * 0.05)
        second.place(_launch(spec), WorkerPlan(Placement.of({1: 2})))
        sim = second._jobs["a"].sim
        assert (sim.epoch, sim.steps, sim.progress) == (
            saved["epoch"], saved["steps"], saved["progress"])
        def configs(doc: dict) -> set:  # (nodes, GPUs, local batch) the job has measured
            return {tuple(c[:3]) for c in doc["configs"]}

        assert configs(saved["estimator"]) <= configs(sim.estimator.to_dict())
        while (r := second.files.report("a")) is None or r.first_step_time is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert second.files.report("a").resumed["steps"] == int(saved["steps"])
        assert "resumes from its checkpoint" in second.files.read_log("a")
    finally:
        second.shutdown()


def test_a_job_checkpointed_after_its_last_epoch_finishes_when_placed_again(tmp_path) -> None:
    first = EmulatedExecutor(tmp_path, cluster="2x4", time_scale=2000)
    spec = _spec(first, epochs=2)
    first.place(_launch(spec), WorkerPlan(Placement.of({0: 4})))
    first.wait_for("a", ExecState.DONE, timeout_s=60, poll_s=0.01)
    steps = first.files.report("a").steps
    _die(first)  # before the service saw the job finish
    second = EmulatedExecutor(tmp_path, cluster="2x4", time_scale=2000)
    try:
        second.place(_launch(spec), WorkerPlan(Placement.of({0: 1})))
        second.wait_for("a", ExecState.DONE, timeout_s=60, poll_s=0.01)
        report = second.files.report("a")
        assert report.steps == steps and report.epoch == 2
    finally:
        second.shutdown()


def _twin_at(first: EmulatedExecutor, spec, placement: Placement, to_s: float,
             batch: BatchConfig | None = None) -> SimJob:
    """The job as it would be at `to_s` (on `first`'s time base) had nothing stopped it: its
    simulated twin, placed when `first` placed it, advanced in one go."""
    sim = first._jobs[spec.name].sim
    twin = SimJob(spec, first.truth.app(spec.app))
    twin.clock_s = sim.first_start_s
    twin.assign(sim.first_start_s, Assignment(placement, batch), 30.0)  # checkpoint-restart
    twin.advance(to_s)
    return twin


@pytest.mark.parametrize("batch", [None, BatchConfig(128, 1)], ids=["own-batch", "policy-batch"])
def test_workers_trained_on_through_a_kill_and_a_reclaim_stops_them_where_they_got(
        tmp_path: Path, batch) -> None:
    """A service killed outright (no final checkpoint, the last second's periodic ones not
    written): its simulated workers outlive it as real ones do. The next executor on the data
    directory, asked to reclaim them, finds the launch in the job's last checkpoint, advances it
    to now on its placement and stops it there: the job has trained exactly as far as one never
    interrupted, and resumes from there when placed again."""
    first = EmulatedExecutor(tmp_path, cluster="2x4", time_scale=400, checkpoint_interval_s=60)
    spec = _spec(first, epochs=100)
    placement = Placement.of({0: 2, 1: 2})
    first.place(_launch(spec), WorkerPlan(placement, batch))
    running = (first._checkpoints.load("a") or {}).get("running")
    assert running is not None  # on disk when place returns, not at the next periodic save
    time.sleep(0.3)  # about 120 emulated s of training
    _die(first)
    time.sleep(0.2)  # the downtime
    second = EmulatedExecutor(tmp_path, cluster="2x4", time_scale=400, checkpoint_interval_s=60)
    try:
        second.reclaim("a", ())
        report = second.files.report("a")
        assert report.state == "stopped" and second.status("a").state is ExecState.STOPPED
        at_s = report.time - first.clock.start  # when it was stopped, on first's time base
        # it trained through the downtime (0.2 real s and the new executor's start)
        assert at_s >= first._jobs["a"].sim.clock_s + 0.2 * 400
        twin = _twin_at(first, spec, placement, at_s, batch)
        assert twin.finish_s is None and twin.steps > 0
        assert report.steps == int(twin.steps) and report.epoch == twin.epoch
        # (exact but for the checkpoint's time, kept in epoch seconds: to about 0.25 us)
        assert report.progress == pytest.approx(twin.progress, rel=1e-8)
        assert [list(m) for m in report.metrics] == [list(m) for m in twin.metrics]
        assert report.launch == 0 and report.world_size == 4
        log = second.files.read_log("a")
        assert "workers left running by an earlier service" in log and "stopped at its" in log
        # nothing runs now: its GPUs are free, and placed again it resumes from where it stopped
        assert second._held == [0, 0]
        second.reclaim("a", ())  # once only
        second.place(_launch(spec), WorkerPlan(Placement.of({1: 4})))
        # the launch started from there (its first report's `resumed`); the executor's clock
        # runs on, so the job may have trained further by the time this looks (under load)
        resumed = second._jobs["a"].resumed
        assert resumed is not None
        assert (resumed["steps"], resumed["epoch"]) == (int(twin.steps), twin.epoch)
        assert second._jobs["a"].sim.progress >= twin.progress * (1 - 1e-8)
        assert second._held == [0, 4] and second.status("a").launches == 1
    finally:
        second.shutdown()


def test_workers_that_finished_during_the_downtime_report_finished_when_it_did(tmp_path) -> None:
    first = EmulatedExecutor(tmp_path, cluster="2x4", time_scale=2000, checkpoint_interval_s=60)
    spec = _spec(first, epochs=5)
    placement = Placement.of({0: 4})
    first.place(_launch(spec), WorkerPlan(placement))
    _die(first)  # at once: its only checkpoint is the launch's start
    finish_s = _twin_at(first, spec, placement, 1e9).finish_s
    deadline = time.monotonic() + 30
    while first.clock() - first.clock.start < finish_s + 50:  # the truth has it done by now
        assert time.monotonic() < deadline
        time.sleep(0.01)
    second = EmulatedExecutor(tmp_path, cluster="2x4", time_scale=2000, checkpoint_interval_s=60)
    try:
        second.reclaim("a", ())
        report = second.files.report("a")
        assert report.state == "finished" and second.status("a").state is ExecState.DONE
        assert report.time - first.clock.start == pytest.approx(finish_s, abs=1e-6)
        assert report.epoch == 5 and second._held == [0, 0]
        # said on the log as a time before this executor started, not as negative seconds
        assert "emulated s before this service started after" in second.files.read_log("a")
    finally:
        second.shutdown()


def test_a_stopped_job_is_not_reclaimed_and_resumes_from_its_checkpoint(tmp_path) -> None:
    first = EmulatedExecutor(tmp_path, cluster="2x4", time_scale=400, checkpoint_interval_s=60)
    spec = _spec(first, epochs=100)
    first.place(_launch(spec), WorkerPlan(Placement.of({0: 4})))
    time.sleep(0.2)
    first.stop("a")  # preempted: its checkpoint, written as stop returns, runs no launch
    stopped = first.files.report("a")
    _die(first)
    second = EmulatedExecutor(tmp_path, cluster="2x4", time_scale=400, checkpoint_interval_s=60)
    try:
        second.reclaim("a", ())
        assert second.files.report("a") is None and second.status("a").state is ExecState.UNKNOWN
        second.place(_launch(spec), WorkerPlan(Placement.of({1: 2})))
        # where it resumed, as the log says (its twin trains on at once, so reading its steps
        # now would count what it trained since: 62 steps more once on a loaded machine)
        assert (f"resumes from its checkpoint: epoch {stopped.epoch}, step {stopped.steps},"
                in second.files.read_log("a"))
    finally:
        second.shutdown()


def test_create_executor_knows_it(tmp_path: Path) -> None:
    ex = create_executor("emulated", tmp_path, cluster="1x2", time_scale=10)
    try:
        assert ex.cluster().total_gpus == 2 and ex.name == "emulated"
    finally:
        ex.shutdown()


def test_its_backend_brings_its_clock_and_its_check_of_submissions(tmp_path: Path) -> None:
    backend = create_runtime("emulated", tmp_path, cluster="1x2", time_scale=10)
    ex = backend.executor
    try:
        assert isinstance(ex, EmulatedExecutor) and backend.clock is ex.clock
        assert backend.check_app is ex.known_apps
        with backend.clock.instant():  # one tick: the clock stands still, the jobs wait
            at = backend.clock()
            time.sleep(0.02)
            assert backend.clock() == at and ex._lock._is_owned()  # type: ignore[attr-defined]
        assert backend.clock() > at
    finally:
        ex.shutdown()
    local = create_runtime("local", tmp_path / "local", slots=1)
    try:
        assert local.clock is WALL_CLOCK and local.check_app("anything") is None
    finally:
        local.executor.shutdown()


def test_the_service_refuses_a_submission_without_a_known_app(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from corral.policies import create_policy
    from corral.service.api import create_app
    from corral.service.loop import ControlLoop
    from corral.service.store import Store

    backend = create_runtime("emulated", tmp_path, cluster="1x4", time_scale=100)
    ex = backend.executor
    store = Store(tmp_path / "state.db")
    loop = ControlLoop(store, ex, create_policy("fifo"), interval_s=60, clock=backend.clock)
    client = TestClient(create_app(store, ex, loop, "t", check_app=backend.check_app))
    auth = {"Authorization": "Bearer t"}
    try:
        r = client.post("/jobs", json={"command": ["x"]}, headers=auth)
        assert r.status_code == 400 and "needs the job's model" in r.json()["detail"]
        r = client.post("/jobs", json={"command": ["x"], "app": "gpt"}, headers=auth)
        assert r.status_code == 400 and "unknown app 'gpt'" in r.json()["detail"]
        body = {"command": ["emulated"], "app": "cifar10", "name": "c", "gpus": 2,
                "batch_size": 512, "init_batch_size": 128, "max_batch_size": 4096,
                "min_local_bsz": 32, "max_local_bsz": 1024, "adaptive": True}
        r = client.post("/jobs", json=body, headers=auth)
        assert r.status_code == 201, r.text
        job = r.json()
        assert job["spec"]["app"] == "cifar10" and job["spec"]["init_batch_size"] == 128
        loop.tick()
        assert 0 <= loop.now_s() < 100 * 60  # emulated seconds since the store's origin
    finally:
        client.close()
        store.close()
        ex.shutdown()


def test_the_lockstep_clock_moves_only_when_paced_and_advances_the_world_first() -> None:
    seen: list[float] = []
    clock = LockstepClock(1e6, step_s=1.0, advance=seen.append)
    assert clock.start == int(clock.start)  # whole seconds: steps land on round multiples
    a = clock()
    time.sleep(0.02)
    assert clock() == a  # real time alone does not move it
    stop = threading.Event()
    for _ in range(3):
        clock.pace(stop, tick_s=5.0)  # a step, not a 5 s wait
    assert clock() == a + 3 and seen == [1.0, 2.0, 3.0]
    with pytest.raises(InputError):
        LockstepClock(100, step_s=0)


def test_the_lockstep_clock_keeps_to_its_time_scale() -> None:
    clock = LockstepClock(100, step_s=1.0)  # at most 100 steps a real second
    stop = threading.Event()
    real = time.monotonic()
    for _ in range(5):
        clock.pace(stop, tick_s=1.0)
    assert time.monotonic() - real >= 0.04 and clock.elapsed_s() == 5.0
