"""The emulated executor on a cluster of several GPU types: a job runs at its placement type's
speed, observes its steps as that type's and reports the type; moved to another type it goes
on at that type's speed; a type its model does not know fails it in one line."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import Assignment
from corral.executors.base import ExecState, JobLaunch, WorkerPlan
from corral.executors.emulated.executor import EmulatedExecutor
from corral.sim.loop.job import SimJob
from corral.sim.truth.one_gpu import one_gpu_profiles
from corral.sim.workloads.common import make_job


@pytest.fixture
def executor(tmp_path: Path):
    ex = EmulatedExecutor(tmp_path, cluster="k80:1x4,v100:1x4", time_scale=5000,
                          report_interval_s=30)
    yield ex
    ex.shutdown()


def _spec(ex: EmulatedExecutor, name: str, epochs: int = 3):
    limits = ex.truth.limits()["cifar10"]
    return dataclasses.replace(make_job(name, 0, "cifar10", limits, 4, 512), epochs=epochs)


def _launch(spec) -> JobLaunch:
    return JobLaunch(spec.name, ("emulated",), ".", spec=spec)


def test_each_job_trains_at_its_types_speed_as_in_the_engine(executor) -> None:
    durations = {}
    for node, gpu_type in enumerate(("k80", "v100")):
        spec = _spec(executor, gpu_type)
        placement = Placement.of({node: 4})
        executor.place(_launch(spec), WorkerPlan(placement))
        sim = executor._jobs[gpu_type].sim
        executor.wait_for(gpu_type, ExecState.DONE, timeout_s=60, poll_s=0.01)
        assert executor.files.report(gpu_type).gpu_type == gpu_type
        # profiled on one GPU of each type (as the engine at arrival), observed as its type's
        other = "v100" if gpu_type == "k80" else "k80"
        assert set(sim.estimator.gpu_types()) == {"k80", "v100"}
        assert sim.estimator.gpu_type == gpu_type and sim.estimator.max_gpus(gpu_type) == 4
        assert sim.estimator.max_gpus(other) == 1
        twin = SimJob(spec, executor.truth.app("cifar10").for_type(gpu_type))
        twin.estimator.bootstrap_missing(  # as the engine profiles a job at its arrival
            one_gpu_profiles(spec, executor.truth.app("cifar10"), Cluster.parse("k80:1x4,v100:1x4")))
        twin.clock_s = sim.first_start_s
        twin.assign(sim.first_start_s, Assignment(placement), 30.0, gpu_type)
        twin.advance(1e9)
        assert sim.finish_s == pytest.approx(twin.finish_s, rel=1e-6)
        durations[gpu_type] = sim.finish_s - sim.first_start_s
    assert durations["v100"] < durations["k80"]  # a V100 trains cifar10 faster than a K80


def test_a_job_moved_to_another_type_reports_it_and_trains_at_its_speed(executor) -> None:
    spec = _spec(executor, "m", epochs=50)
    launch = _launch(spec)
    executor.place(launch, WorkerPlan(Placement.of({0: 4})))
    sim = executor._jobs["m"].sim
    assert sim.gpu_type == "k80" and sim.truth is executor.truth.app("cifar10").for_type("k80")
    executor.place(launch, WorkerPlan(Placement.of({1: 4})))
    assert sim.gpu_type == "v100" and sim.truth is executor.truth.app("cifar10").for_type("v100")
    deadline = time.monotonic() + 60
    # the launch on the V100s reports
    while (r := executor.files.report("m")) is None or r.launch != 1:
        assert time.monotonic() < deadline, "no report of the second launch"
        time.sleep(0.01)
    assert executor.files.report("m").gpu_type == "v100"
    executor.stop("m", cancel=True)


def test_a_type_the_model_does_not_know_fails_the_job(tmp_path: Path) -> None:
    ex = EmulatedExecutor(tmp_path, cluster="k80:1x4,b200:1x4", time_scale=5000)
    try:
        ex.place(_launch(_spec(ex, "h")), WorkerPlan(Placement.of({1: 4})))
        st = ex.status("h")
        assert st.state is ExecState.FAILED and "b200" in st.message and "\n" not in st.message
    finally:
        ex.shutdown()


def test_a_new_job_is_profiled_on_one_gpu_of_each_type_as_the_engine_profiles_it(
        executor, tmp_path: Path) -> None:
    """`profile` is the engine's arrival profile; the job's own twin starts from it, so its
    reports carry a model of every type; a one-type cluster is not profiled."""
    spec = _spec(executor, "p")
    want = one_gpu_profiles(spec, executor.truth.app("cifar10"), Cluster.parse("k80:1x4,v100:1x4"))
    assert executor.profile(spec) == want and set(want) == {"k80", "v100"}
    assert executor.profile(dataclasses.replace(spec, gpu_type="v100")) == {"v100": want["v100"]}
    executor.place(_launch(spec), WorkerPlan(Placement.of({1: 1})))
    sim = executor._jobs["p"].sim
    assert set(sim.estimator.gpu_types()) == {"k80", "v100"}
    plain = EmulatedExecutor(tmp_path / "plain", cluster="2x4", time_scale=5000)
    try:
        assert plain.profile(spec) == {}
    finally:
        plain.shutdown()


def test_a_cluster_files_speed_column_describes_a_type_for_the_emulation(tmp_path: Path) -> None:
    (tmp_path / "cluster.txt").write_text("k-0 4 k80\nb-0 4 B200 v100*3\n")
    ex = EmulatedExecutor(tmp_path / "d", cluster=str(tmp_path / "cluster.txt"), time_scale=5000)
    try:
        assert "b200" in ex.truth.gpu_types("cifar10")
        v100, b200 = (ex.truth.app("cifar10").for_type(t).step_time((1,), 64) for t in ("v100", "b200"))
        assert b200[0] < v100[0] and b200[1] == v100[1]
    finally:
        ex.shutdown()
