"""A model's one-GPU profile per GPU type, learned from the jobs that ran
(`corral.service.type_history`): a real executor profiles nothing before a job runs, so the
service seeds a new job of a model with what earlier jobs of that model measured on each type,
as the emulated executor's profile would; the jobs of that model already waiting gain it too,
it survives a restart, and a type no job of the model ran on is still left to be learned."""

from __future__ import annotations

import json

import pytest
from fakes import FakeExecutor
from loopkit import Clock, make_loop, submit

from corral.core.cluster import Cluster, Node
from corral.core.jobs import JobSpec
from corral.perf.estimator import JobEstimator
from corral.service.type_history import TypeHistory, one_gpu_step_s


class TwoTypes(FakeExecutor):
    def cluster(self) -> Cluster:
        return Cluster((Node("box-t4", 1, "t4"), Node("box-a100", 1, "a100")))


def _measured(spec, gpu_type: str, step_s: float) -> JobEstimator:
    est = JobEstimator(spec.init_bsz, spec.max_bsz, spec.min_local_bsz, spec.max_local_bsz)
    est.observe_step(1, 1, spec.one_gpu_local_bsz(), step_s, 0.0, count=4, gpu_type=gpu_type)
    return est


def test_a_later_job_of_the_model_starts_with_what_an_earlier_one_measured(store) -> None:
    clock = Clock()
    executor = TwoTypes()
    loop = make_loop(store, executor, clock=clock)
    first = submit(store, clock.t, app="digits", batch_size=64, gpu_type="t4")
    waiting = submit(store, clock.t, app="digits", batch_size=64, gpu_type="t4")
    other = submit(store, clock.t, app="resnet", batch_size=64)
    loop.tick()
    assert loop.jobs[first].placement and not loop.jobs[waiting].placement
    assert loop.jobs[waiting].profile == {}  # nothing known of digits yet

    spec = loop.jobs[first].spec
    executor.reports[first] = {"time": 1.0, "gpu_type": "t4",
                               "estimator": _measured(spec, "t4", 0.2).to_dict()}
    clock.t += 1
    loop.tick()
    step, local = loop.jobs[waiting].profile["t4"]
    assert local == spec.one_gpu_local_bsz() and step == pytest.approx(0.2, rel=0.05)
    assert set(loop.jobs[waiting].estimator.gpu_types()) == {"t4"}
    assert loop.jobs[other].profile == {}  # another model learns nothing from it

    later = submit(store, clock.t, app="digits", batch_size=64)  # may run on either type
    clock.t += 1
    loop.tick()
    assert set(loop.jobs[later].profile) == {"t4"}  # the a100 is still to be learned

    restarted = make_loop(store, TwoTypes(), clock=clock)  # kept in the store
    again = submit(store, clock.t, app="digits", batch_size=64)
    restarted.tick()
    assert set(restarted.jobs[again].profile) == {"t4"}


def test_seeded_types_are_not_taken_for_measured_ones(store) -> None:
    history = TypeHistory(store)
    est = JobEstimator(128, 1024, 16, 256)
    est.bootstrap("v100", 0.07, 128)  # seeded only
    est.observe_step(1, 2, 128, 0.5, 0.1, count=3, gpu_type="k80")  # ran
    spec = _spec("cifar10")
    assert history.learn(spec, est, seeded={"v100": (0.07, 128)}) == ["k80"]
    assert set(history.profile(spec, Cluster.parse("k80:1x4,v100:1x4"))) == {"k80"}
    assert history.learn(spec, est, seeded={"v100": (0.07, 128)}) == []  # nothing new
    assert one_gpu_step_s(est, "p100", 128) is None


def test_an_unreadable_stored_history_starts_afresh(store, caplog) -> None:
    store.set_meta("type_history", "{not json")
    assert TypeHistory(store).profile(_spec(), Cluster.parse("t4:1x4")) == {}
    assert "unreadable" in caplog.text
    store.set_meta("type_history", json.dumps({"digits": {"t4": [0.2, 64]}}))
    assert TypeHistory(store).profile(_spec(), Cluster.parse("t4:1x4,a100:1x4")) == {"t4": (0.2, 64)}


def _spec(app: str = "digits"):
    return JobSpec("j", 0.0, app, gpus=2, batch_size=128, init_bsz=128, max_bsz=1024,
                   min_local_bsz=16, max_local_bsz=256)
