"""Duration-based jobs (corral.sim.truth.scaled) and the loaders of any trace
(corral.sim.workloads.columns): a job takes its trace duration on its GPUs, keeps its model's
scaling, and the ITP/ElasticFlow trace loads as a user types it."""

from __future__ import annotations

from dataclasses import replace

import datafiles
import pytest

from corral.core import Cluster
from corral.core.errors import InputError
from corral.policies import create_policy
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.truth.scaled import job_app
from corral.sim.workloads import Workload, describe_workload, load_workload, tuned_config
from corral.sim.workloads.common import make_job


def one_job(app: str, gpus: int, duration: float):
    truth = CatalogTruth()
    limits = truth.limits()[app]
    g, batch = tuned_config(limits, gpus)
    return truth, replace(make_job("j", 0.0, app, limits, g, batch), trace_duration_s=duration)


@pytest.mark.parametrize("app,gpus,duration", [("cifar10", 4, 3600.0), ("bert", 8, 600.0),
                                               ("imagenet", 16, 7200.0)])
def test_a_duration_job_alone_on_its_gpus_takes_its_duration(app, gpus, duration):
    truth, spec = one_job(app, gpus, duration)
    policy = create_policy("fifo")
    result = Simulator(truth, policy, Cluster.parse("4x4")).run(Workload("w", [spec], "t"))
    run = result.jobs[0].finish_s - result.jobs[0].first_start_s
    pause = 30.0  # checkpoint-restart's start pause
    assert run - pause == pytest.approx(duration, rel=1e-6)


def test_scaling_keeps_the_models_speedup_and_noise():
    truth, spec = one_job("bert", 4, 1000.0)
    scaled = job_app(truth, spec, 4)
    app = truth.app("bert")
    assert scaled.step_time((4,), 24) == app.step_time((4,), 24)
    assert scaled.grad_stats(384, 3) == app.grad_stats(384, 3)
    f = scaled.epoch_progress()[0] / app.epoch_progress()[0]
    assert scaled.epoch_progress() == pytest.approx(tuple(b * f for b in app.epoch_progress()))
    assert job_app(truth, replace(spec, trace_duration_s=None), 4) is app


def test_generic_columns_with_a_mapping_and_size_classes(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("id,t,g,secs,arch\na,100,2,600,resnet\nb,160,1,90000,weird\nc,400,4,1200,\n")
    apps = CatalogTruth().limits()
    wl = load_workload(f, apps, columns={"name": "id", "submit": "t", "gpus": "g",
                                         "duration": "secs", "model": "arch"},
                       model_map={"resnet": "imagenet"})
    assert [j.submit_time_s for j in wl.jobs] == [0.0, 60.0, 300.0]
    assert wl.jobs[0].app == "imagenet" and wl.jobs[1].app == "yolov3"  # 25 GPU-h class
    assert all(j.trace_duration_s for j in wl.jobs)
    cols = describe_workload(wl)["columns"]
    assert "model map" in cols["arch"] and "GPU-time class" in cols["arch"]
    with pytest.raises(InputError, match="missing column"):
        load_workload(f, apps, columns={"submit": "nope", "gpus": "g", "duration": "secs"})


def test_itp_trace_loads_with_its_model_map():
    wl = load_workload(datafiles.need("itp"), CatalogTruth().limits())
    assert len(wl.jobs) == 195 and wl.jobs[0].submit_time_s == 0.0
    assert {j.app for j in wl.jobs} == {"imagenet", "bert", "deepspeech2"}
    assert sum(wl.trace_gpu_s.values()) / 3600 == pytest.approx(5489.8, abs=0.1)
