"""The sim-to-real replay's arithmetic on a hand-made run record: the restart pause, the time
outside steps per epoch and the simulated JCT, each computed by hand."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from corral.core.cluster import Cluster, Node
from corral.core.errors import InputError
from corral.perf.estimator import JobEstimator
from corral.policies import create_policy
from corral.protocol.report import Report
from corral.service.jobs import LiveJob, LiveStatus
from corral.service.loop import run_settings
from corral.service.run_record import read_run
from corral.service.store import Store
from corral.service.submission import Submission
from corral.sim.analysis.measured_run import (
    FinishedJob,
    MeasuredRun,
    launch_rates,
    measured_catalog,
    measured_mechanism,
    replay,
    resize_cost_s,
    resize_rate_ratio,
    restart_delay_s,
)

ORIGIN = 1000.0
STEP_S = 0.01


def _report(steps: int, epoch: int, state: str, estimator: JobEstimator) -> dict:
    return {"state": state, "launch": 0, "world_size": 1, "batch": [32, 0], "total_bsz": 32,
            "steps": steps, "epoch": epoch, "progress": float(steps), "samples": 32 * steps,
            "estimator": estimator.to_dict(), "first_step_time": ORIGIN + 3.0, "time": steps}


def _record(tmp_path: Path, finished: bool = True, settings: bool = True,
            resizes: tuple[dict, ...] = (), nodes: list | None = None,
            gpu_type: str = "") -> Path:
    """One fixed-batch job on 1 of 2 slots under fifo (interval 1 s): submitted at 0.5 s,
    placed at 1.0 s, first step at 3.0 s, 2 epochs of 45 steps of 10 ms, last report at 5.0 s,
    exited at 6.0 s."""
    store = Store(tmp_path / "state.db")
    store.set_meta("origin", repr(ORIGIN))
    if settings:
        store.set_meta("run", json.dumps({"policy": "fifo", "params": {}, "interval_s": 1.0,
                                          "nodes": nodes or [["n0", 2]]}))
    sub = Submission(command=["python", "train.py"], batch_size=32).checked(2)
    doc = store.add_job(lambda job_id: LiveJob(job_id, sub, sub.spec(job_id, 0.5)).record())
    est = JobEstimator(32, 32, 32, 32, adaptive=False)
    for _ in range(5):
        est.observe_step(1, 1, 32, STEP_S, 0.0, gpu_type=gpu_type)
    store.add_assignment(1.0, doc["id"], "n0:1", 1, None)
    store.add_telemetry(3.0, doc["id"], Report.parse(_report(1, 0, "running", est)))
    last = Report.parse(_report(90, 2, "finished", est))
    store.add_telemetry(5.0, doc["id"], last)
    job = LiveJob.from_doc(doc)
    job.report = last
    job.resizes = list(resizes)
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


def test_each_job_keeps_its_own_time_outside_steps(tmp_path):
    """A long job of the same application as a short one: the short one's exit, paid once,
    is not charged to every epoch of the long one."""
    run = MeasuredRun.from_record(read_run(_record(tmp_path)))
    short = run.jobs[0]
    first, _ = short.telemetry
    steps = 20 * 45  # 20 epochs of 45 steps of 10 ms, 1 s outside them in all, exit 1 s
    last = {**first, "time_s": first["time_s"] + (steps - 1) * STEP_S + 1.0, "steps": steps,
            "progress": float(steps), "epoch": 20, "state": "finished"}
    long = dataclasses.replace(short, id="job-2", progress=float(steps), epochs=20,
                               finish_s=last["time_s"] + 1.0, telemetry=[first, last])
    models = measured_catalog(dataclasses.replace(run, jobs=[short, long]))["models"]
    assert models["job-1"]["epoch_overhead_s"] == pytest.approx((2.0 - 89 * STEP_S + 1.0) / 2,
                                                                rel=0.02)
    assert models["job-2"]["epoch_overhead_s"] == pytest.approx((1.0 + 1.0) / 20, rel=0.05)


def test_the_replay_predicts_the_jct_of_the_record(tmp_path):
    rows, mechanism = replay(MeasuredRun.from_record(read_run(_record(tmp_path))))
    delay = mechanism.overheads.start_s
    assert mechanism.name == "checkpoint-restart"  # the run resized nothing in place
    (row,) = rows
    overhead = (2.0 - 89 * STEP_S + 1.0) / 2
    # placed at the 1 s round, 2 s pause, then per epoch 45 steps and the time outside them
    expected = 1.0 + delay + 2 * (45 * STEP_S + overhead) - 0.5
    assert row.real_jct_s == pytest.approx(5.5)
    assert row.sim_jct_s == pytest.approx(expected, rel=0.02)
    assert abs(row.error) < 0.02


def test_the_run_settings_keep_each_nodes_gpu_type():
    """A typed node is stored as [name, gpus, type]; an untyped one as before, [name, gpus]."""
    typed = Cluster.parse("k80:1x2,v100:2x4")
    settings = run_settings(create_policy("fifo"), 60.0, typed)
    assert settings["nodes"] == [[n.name, n.gpus, n.gpu_type] for n in typed.nodes]
    assert Cluster(tuple(Node.from_row(r) for r in settings["nodes"])) == typed
    plain = run_settings(create_policy("fifo"), 60.0, Cluster.parse("2x4"))
    assert plain["nodes"] == [["node0", 4], ["node1", 4]]


def test_a_typed_run_replays_on_its_typed_cluster(tmp_path):
    """The replay simulates the run's GPU types (each with its own fit), not an untyped
    cluster; a record written before types ([name, gpus]) still reads as untyped."""
    nodes = [["n0", 2, "v100"], ["k0", 2, "k80"]]
    run = MeasuredRun.from_record(read_run(_record(tmp_path, nodes=nodes, gpu_type="v100")))
    assert run.cluster.gpu_types == ("v100", "k80")
    assert [n.gpu_type for n in run.cluster.nodes] == ["v100", "k80"]
    entry = measured_catalog(run)["models"]["job-1"]
    # v100 from the steps it measured there; k80, where it never ran, from all its steps
    assert set(entry["type_throughput"]) == {"v100", "k80"}
    (row,), _ = replay(run)
    assert row.sim_jct_s is not None and abs(row.error) < 0.05
    old = MeasuredRun.from_record(read_run(_record(tmp_path / "old")))
    assert old.cluster.gpu_types == ("",) and "type_throughput" not in \
        measured_catalog(old)["models"]["job-1"]


def test_a_run_without_what_the_replay_needs_is_refused_in_one_line(tmp_path):
    with pytest.raises(InputError, match="state.db missing"):
        MeasuredRun.from_record(read_run(tmp_path / "nowhere"))
    with pytest.raises(InputError, match="no job finished training"):
        MeasuredRun.from_record(read_run(_record(tmp_path / "a", finished=False)))
    with pytest.raises(InputError, match="settings were not recorded"):
        MeasuredRun.from_record(read_run(_record(tmp_path / "b", settings=False)))


GROW = {"launch": 1, "mechanism": "in-place", "from_gpus": 1, "to_gpus": 2, "pause_s": 0.3,
        "to_new_size_s": 2.3}
SHRINK = {"launch": 2, "mechanism": "in-place", "from_gpus": 2, "to_gpus": 1, "pause_s": 0.2,
          "to_new_size_s": 0.2}


def test_an_in_place_grow_costs_its_pause_and_the_new_size_it_lacked_while_joiners_started():
    # 2 s at 1 of its 2 new GPUs while the new worker started: half of it lost, plus the pause
    assert resize_cost_s(GROW) == pytest.approx(0.3 + 2.0 * 0.5)
    assert resize_cost_s(SHRINK) == pytest.approx(0.2)  # a shrink loses its pause
    assert resize_cost_s({**GROW, "mechanism": "checkpoint-restart", "to_new_size_s": 0.3}) == 0.3


def _rows(launch: int, start_s: float, progress: float, rate: float, count: int = 3) -> list[dict]:
    """`count` reports, a second apart, of a launch progressing at `rate` per second."""
    return [{"launch": launch, "time_s": start_s + i, "progress": progress + rate * i}
            for i in range(count)]


def test_an_in_place_grow_is_charged_by_the_progress_rates_measured_around_it():
    # launch 0 made 10 iterations/s on 1 worker, launch 1 made 16 on 2: while its new worker
    # started it lacked 1 - 10/16 of the new rate, not half of it (as by GPU count)
    job = FinishedJob("job-1", None, 0.0, 0.0, 1, {}, _rows(0, 0.0, 0.0, 10.0)
                      + _rows(1, 3.0, 30.0, 16.0), [], [GROW])
    rates = launch_rates(job)
    assert rates == pytest.approx({0: 10.0, 1: 16.0})
    assert resize_rate_ratio(rates, GROW) == pytest.approx(10.0 / 16.0)
    assert resize_cost_s(GROW, 10.0 / 16.0) == pytest.approx(0.3 + 2.0 * (1 - 10.0 / 16.0))
    assert resize_rate_ratio({0: 10.0}, GROW) is None  # launch 1 not measured: by GPU count


def test_an_in_place_run_is_charged_for_the_resizes_it_could_not_do_in_place(tmp_path):
    fallback = {**SHRINK, "mechanism": "checkpoint-restart", "pause_s": 4.0,
                "to_new_size_s": 4.0}
    run = MeasuredRun.from_record(read_run(_record(tmp_path, resizes=(GROW, SHRINK, fallback))))
    in_place = measured_mechanism(run)
    assert in_place.name == "in-place"
    assert in_place.overheads.shrink_s == pytest.approx((0.2 + 4.0) / 2)
    assert measured_mechanism(run, "checkpoint-restart").overheads.shrink_s == pytest.approx(4.0)


def test_a_launch_that_resized_a_job_is_no_start(tmp_path):
    # the record's only launch (0) is a start; recorded as a resize's launch, it is not one
    restart = {**SHRINK, "launch": 0, "mechanism": "checkpoint-restart"}
    run = MeasuredRun.from_record(read_run(_record(tmp_path, resizes=(restart,))))
    with pytest.raises(InputError, match="no launch of the run reported its first step"):
        restart_delay_s(run)


def test_a_run_resized_in_place_replays_with_its_measured_pauses_or_under_restarts(tmp_path):
    run = MeasuredRun.from_record(read_run(_record(tmp_path, resizes=(GROW, SHRINK))))
    own = measured_mechanism(run)  # the run's own: it resized in place
    assert own.name == "in-place"
    assert (own.overheads.grow_s, own.overheads.shrink_s) == pytest.approx((1.3, 0.2))
    assert own.overheads.start_s == pytest.approx(2.0)  # launch 0: placed 1.0 s, first step 3.0 s
    restarts = measured_mechanism(run, "checkpoint-restart")  # no such resize: each costs a start
    assert restarts.name == "checkpoint-restart"
    assert restarts.overheads.grow_s == restarts.overheads.shrink_s == pytest.approx(2.0)
    only_grow = measured_mechanism(MeasuredRun.from_record(read_run(
        _record(tmp_path / "g", resizes=(GROW,)))))
    assert only_grow.overheads.shrink_s == pytest.approx(1.3)  # one kind stands for the other


def test_a_run_that_resized_nothing_in_place_cannot_replay_in_place(tmp_path):
    run = MeasuredRun.from_record(read_run(_record(tmp_path)))
    assert measured_mechanism(run).name == "checkpoint-restart"
    with pytest.raises(InputError, match="resized no job in place"):
        measured_mechanism(run, "in-place")
    with pytest.raises(InputError, match="unknown mechanism 'sidecar'"):
        measured_mechanism(run, "sidecar")


def test_corral_replay_prints_the_measured_mechanism_and_refuses_one_it_did_not_measure(tmp_path):
    from typer.testing import CliRunner

    from corral.cli.main import app

    data = _record(tmp_path, resizes=(GROW, SHRINK))
    out = CliRunner().invoke(app, ["replay", "--data-dir", str(data)])
    assert out.exit_code == 0, out.output
    assert "in-place (measured: start 2.00 s, grow 1.30 s, shrink 0.20 s)" in " ".join(out.output.split())
    out = CliRunner().invoke(app, ["replay", "--data-dir", str(data), "-m", "checkpoint-restart"])
    assert out.exit_code == 0 and "grow 2.00 s" in " ".join(out.output.split()), out.output
    bad = CliRunner().invoke(app, ["replay", "--data-dir", str(_record(tmp_path / "b")),
                                   "-m", "in-place"])
    assert bad.exit_code != 0 and "resized no job in place" in bad.output
    assert "Traceback" not in bad.output


def _add_left_out_jobs(directory: Path) -> None:
    """Beside the record's finished job: one failed, one cancelled, one still queued, one done
    without corral.train reports."""
    store = Store(directory / "state.db")
    sub = Submission(command=["python", "other.py"], batch_size=32).checked(2)
    for status in (LiveStatus.FAILED, LiveStatus.CANCELLED, LiveStatus.QUEUED, LiveStatus.DONE):
        doc = store.add_job(lambda job_id: LiveJob(job_id, sub, sub.spec(job_id, 1.0)).record())
        job = LiveJob.from_doc(doc)
        job.status = status
        store.save_job(job.to_doc())
    store.close()


def test_the_replay_ends_with_the_median_and_worst_error_and_the_jobs_left_out(tmp_path):
    from corral.sim.analysis.measured_run import ReplayedJob, replay_summary

    _add_left_out_jobs(_record(tmp_path))
    run = MeasuredRun.from_record(read_run(tmp_path))
    assert run.left_out == [("job-2", "failed"), ("job-3", "cancelled"),
                            ("job-4", "not finished (queued)"),
                            ("job-5", "finished without corral.train reports")]
    rows = [ReplayedJob("job-1", "a", 100.0, 79.0), ReplayedJob("job-6", "a", 100.0, 168.0),
            ReplayedJob("job-7", "b", 100.0, 110.0), ReplayedJob("job-8", "b", 100.0, None)]
    assert replay_summary(rows, run.left_out) == [
        "3 job(s) replayed: median absolute JCT error 21.0%, worst 68.0% (job-6: +68.0%)",
        "not finished in the simulator (1): job-8",
        "left out 4 job(s), which the replay needs to have trained to the end under "
        "corral.train: failed: job-2; cancelled: job-3; not finished (queued): job-4; "
        "finished without corral.train reports: job-5"]
    assert replay_summary(rows[:1], [("x", "failed")] * 12, names=2)[-1].endswith(
        "failed: x, x and 10 more")
    assert replay_summary(rows[:1])[-1].startswith("left out: none")
    # a job of a few seconds, most of them its start: the summary says so (the README's old
    # example job printed +57.1% and nothing more)
    short = [ReplayedJob("job-9", "a", 4.4, 6.9)]
    assert replay_summary(short, start_s=2.1)[1] == (
        "job-9 ran 4.4 s, of which starting a launch takes about 2.1 s (48%): the simulator "
        "charges the run's mean start, so in a job this short a start that differs from the "
        "mean is much of its JCT")
    assert len(replay_summary(rows, run.left_out, start_s=2.1)) == 3  # long jobs: no such line


def test_corral_replay_prints_the_summary(tmp_path):
    from typer.testing import CliRunner

    import corral.cli.replay_cmd  # noqa: F401 - registers `corral replay`
    from corral.cli.main import app

    _add_left_out_jobs(_record(tmp_path))
    result = CliRunner().invoke(app, ["replay", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines[-2].startswith("1 job(s) replayed: median absolute JCT error ")
    assert "(job-1: " in lines[-2]
    assert lines[-1].startswith("left out 4 job(s)") and "failed: job-2" in lines[-1]


def test_each_application_restarts_at_its_own_measured_pace(tmp_path):
    from corral.sim.analysis.measured_run import restart_delays_by_app

    run = MeasuredRun.from_record(read_run(_record(tmp_path)))
    one = run.jobs[0]
    slow = dataclasses.replace(
        one, id="job-2", spec=dataclasses.replace(one.spec, name="job-2", app="slow"),
        telemetry=[{**row, "first_step_s": row["first_step_s"] + 4.0}
                   if row.get("first_step_s") is not None else row for row in one.telemetry])
    both = dataclasses.replace(run, jobs=[one, slow])
    assert restart_delays_by_app(both) == pytest.approx({one.spec.app: 2.0, "slow": 6.0})
    mech = measured_mechanism(both)
    assert mech.overheads.start_s == pytest.approx(4.0)  # the run's mean, for any other job
    assert mech.overheads_of("job-1").start_s == pytest.approx(2.0)
    assert mech.overheads_of("job-2").start_s == pytest.approx(6.0)
    assert measured_mechanism(run).per_model == ()  # one application: one pace
    rows, charged = replay(both)
    assert charged == mech
    sim = {r.job_id: r.sim_jct_s for r in rows}
    assert sim["job-2"] - sim["job-1"] == pytest.approx(4.0, abs=1e-6)
