"""GPU types the truth lacks, described by their speed (issue 44 item 4): the built-in catalog's
today's types, `TruthSource.speeds` (`--gpu-speed`) on the catalog and on measured profiles,
errors, and that a faster type finishes jobs sooner."""

from __future__ import annotations

import dataclasses

import pytest
from test_truth_types import _toy

from corral.core import Cluster, create_policy
from corral.core.errors import InputError
from corral.core.gpu_speeds import parse_gpu_speeds
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.truth.source import TruthSource
from corral.sim.workloads import Workload
from corral.sim.workloads.synthetic import synthetic


@pytest.fixture(scope="module")
def catalog() -> CatalogTruth:
    return CatalogTruth()


def test_the_built_in_catalog_knows_todays_types(catalog) -> None:
    assert catalog.gpu_types("bert") == ("", "k80", "p100", "v100", "a100", "h100", "l4")
    app = catalog.app("imagenet")
    v100, a100, h100 = (app.for_type(t) for t in ("v100", "a100", "h100"))
    for counts, m in (((1,), 32), ((4,), 64), ((4, 4), 64)):
        v_step, v_sync = v100.step_time(counts, m)
        a_step, a_sync = a100.step_time(counts, m)
        assert a_sync == v_sync  # synchronisation kept
        assert a_step - a_sync == pytest.approx((v_step - v_sync) / 2.2, rel=1e-12)
        h_step, h_sync = h100.step_time(counts, m)  # described by the a100, in turn by the v100
        assert h_step - h_sync == pytest.approx((a_step - a_sync) / 3.17, rel=1e-12)
    assert app.for_type("a100") is a100 and a100.gpu_type == "a100"
    assert a100.grad_stats(64, 1) == app.grad_stats(64, 1)


def test_a_users_speed_replaces_the_built_in_one() -> None:
    truth = TruthSource(speeds=parse_gpu_speeds("a100=v100*4")).load()
    app = truth.app("cifar10")
    (v_step, sync), (a_step, a_sync) = (app.for_type(t).step_time((1,), 64) for t in ("v100", "a100"))
    assert a_step - a_sync == pytest.approx((v_step - sync) / 4, rel=1e-12)
    # h100 is still the built-in's, now over this a100
    h_step, h_sync = app.for_type("h100").step_time((1,), 64)
    assert h_step - h_sync == pytest.approx((a_step - a_sync) / 3.17, rel=1e-12)


def test_measured_profiles_take_a_described_type(tmp_path) -> None:
    _toy(tmp_path, types=("", "v100"))
    truth = TruthSource.of(profiles=tmp_path, speeds=parse_gpu_speeds("dgx-ext=V100*2")).load()
    app = truth.app("toy")
    assert truth.gpu_types("toy") == ("", "v100", "dgx-ext")
    v_step, v_sync = app.for_type("v100").step_time((2, 2), 16)
    step, sync = app.for_type("dgx-ext").step_time((2, 2), 16)
    assert sync == v_sync and step - sync == pytest.approx((v_step - v_sync) / 2)


def test_a_base_no_application_knows_is_one_line(tmp_path) -> None:
    _toy(tmp_path, types=("",))
    source = TruthSource.of(profiles=tmp_path, speeds=parse_gpu_speeds("a100=v100*2"))
    with pytest.raises(InputError) as err:
        source.load()
    message = str(err.value)
    assert message.startswith("--gpu-speed 'a100=v100*2': a100=v100*2: base type 'v100' is unknown")
    assert "it knows '' (the unnamed type), 'a100'" in message and "\n" not in message


def _one_job(catalog: CatalogTruth) -> Workload:
    spec = synthetic(catalog.limits(), num_jobs=1, rate_per_hour=10.0, mix={"cifar10": 1.0},
                     seed=2, name="one").jobs[0]
    return Workload("one", [dataclasses.replace(spec, submit_time_s=0.0, gpus=4)], "test")


def test_a_faster_type_gives_shorter_jcts(catalog) -> None:
    def jct(cluster: str, speeds: str | None = None) -> float:
        truth = TruthSource(speeds=parse_gpu_speeds(speeds) if speeds else ()).load()
        job = Simulator(truth, create_policy("fifo"), Cluster.parse(cluster)).run(
            _one_job(catalog)).jobs[0]
        return job.finish_s - job.submit_s

    v100, a100, h100 = jct("v100:1x4"), jct("a100:1x4"), jct("h100:1x4")
    assert h100 < a100 < v100
    assert jct("a100:1x4", "a100=v100*4") < a100 < jct("a100:1x4", "a100=v100*1.5") < v100
    assert jct("a100:1x4", "a100=v100*1") == pytest.approx(v100)
