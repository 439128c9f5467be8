"""Ground truth: profile interpolation on hand-checked rows, the catalog, malformed profiles."""

from __future__ import annotations

import json
import shutil
from importlib import resources

import datafiles
import pytest

from corral.core.errors import InputError
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.truth.profiles import ProfileTruth, canonical_counts

needs_profiles = datafiles.needs("pollux-profiles")


@pytest.fixture(scope="module")
def cifar():
    return ProfileTruth(datafiles.need("pollux-profiles")).app("cifar10")


def test_canonical_rotation():
    assert canonical_counts((2, 2, 1)) == (1, 2, 2)
    assert canonical_counts((3, 1, 4)) == (1, 4, 3)
    assert canonical_counts(()) == ()


@needs_profiles
def test_listed_placement_exact_and_interpolated(cifar):
    # placements.csv rows: "4,32,0.058215..,0.014322.." and "4,45,0.062676..,0.009589.."
    step, sync = cifar.step_time((4,), 32)
    assert step == pytest.approx(0.05821514129638672)
    assert sync == pytest.approx(0.01432212142944336)
    step, sync = cifar.step_time((4,), 38.5)  # halfway between 32 and 45
    assert step == pytest.approx((0.05821514129638672 + 0.06267681121826171) / 2)
    assert sync == pytest.approx((0.01432212142944336 + 0.009589644718170167) / 2)


@needs_profiles
def test_placement_is_looked_up_by_rotation(cifar):
    # "13" is stored; (3, 1) is the same placement rotated
    assert cifar.step_time((3, 1), 45) == pytest.approx((0.14392664432525634, 0.09502823638916015))


@needs_profiles
def test_unlisted_placement_uses_scalability_rows(cifar):
    # 6 nodes x 1 GPU is not in placements.csv; scalability.csv has "6,6,45,0.13931..,0.09045.."
    step, sync = cifar.step_time((1, 1, 1, 1, 1, 1), 45)
    assert step == pytest.approx(0.1393126964569092, rel=1e-6)
    assert sync == pytest.approx(0.09045788574218751, rel=1e-6)


@needs_profiles
def test_grad_stats_interpolate_between_batch_sizes(cifar):
    # validation-128 epoch 0: sqr 8.947.., var 5.066..; validation-256 epoch 0: 17.379.., 13.937..
    sqr, var = cifar.grad_stats(192, 0)
    assert sqr == pytest.approx((8.947307535897329 + 17.379458169870425) / 2)
    assert var == pytest.approx((5.066593295150894 + 13.937760473946334) / 2)
    assert cifar.grad_stats(64, 0) == pytest.approx((8.947307535897329, 5.066593295150894))


@needs_profiles
def test_epoch_boundaries_are_minimum_over_batch_sizes(cifar):
    # epoch 1 progress: 391.0 at B=128, 390.714.. at B=256 -> the minimum
    assert cifar.epoch_progress()[0] <= 390.71438596642224
    assert len(cifar.epoch_progress()) == 100
    lim = cifar.limits
    assert (lim.init_bsz, lim.max_bsz, lim.min_local_bsz, lim.max_local_bsz) == (128, 4096, 32, 1024)


@needs_profiles
def test_gain_follows_readme_formula(cifar):
    sqr, var = cifar.grad_stats(512, 3)
    scale = 512 / 128
    assert cifar.gain(512, 3) == pytest.approx((var + sqr) / (var / scale + sqr))


def test_builtin_catalog_loads_all_models():
    truth = CatalogTruth()
    assert set(truth.apps()) == {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
    cifar = truth.app("cifar10")
    one, _ = cifar.step_time((1,), 128)
    four, sync4 = cifar.step_time((4,), 128)
    assert 0 < one < four and sync4 > 0  # syncing costs something
    assert 0 < cifar.gain(1024, 10) <= 1024 / 128
    assert "Pollux" in truth.origin


@needs_profiles
def test_catalog_is_close_to_profiles():
    from corral.sim.truth.calibrate import calibrate, fidelity

    profiles = datafiles.need("pollux-profiles")
    doc = calibrate(profiles)
    err = fidelity(doc, profiles)
    for model, e in err.items():
        assert e["step_time_mre"] < 0.12, model
        assert e["efficiency_mre"] < 0.10, model


def test_malformed_profiles_name_file_and_row(tmp_path):
    app = tmp_path / "toy"
    app.mkdir()
    (app / "placements.csv").write_text("placement,local_bsz,step_time,sync_time\n1,32,0.1,0.01\n1,x,0.1,0.01\n")
    (app / "scalability.csv").write_text("num_nodes,num_replicas,local_bsz,step_time,sync_time\n")
    with pytest.raises(InputError, match=r"placements.csv:3: expected numbers"):
        ProfileTruth(tmp_path)


def test_profile_missing_column(tmp_path):
    app = tmp_path / "toy"
    app.mkdir()
    (app / "placements.csv").write_text("placement,local_bsz,step_time\n1,32,0.1\n")
    with pytest.raises(InputError, match=r"expected columns"):
        ProfileTruth(tmp_path)


def test_profiles_dir_missing(tmp_path):
    with pytest.raises(InputError, match="not found"):
        ProfileTruth(tmp_path / "nope")
    with pytest.raises(InputError, match="no <model>/placements.csv"):
        ProfileTruth(tmp_path)


@needs_profiles
def test_validation_with_bad_row(tmp_path):
    dst = tmp_path / "cifar10"
    shutil.copytree(datafiles.need("pollux-profiles") / "cifar10", dst)
    path = dst / "validation-256.csv"
    lines = path.read_text().splitlines()
    lines[4] = "1,2,oops,4,5"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"validation-256.csv:5"):
        ProfileTruth(tmp_path)


def test_bad_catalog_file(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        CatalogTruth(bad)
    bad.write_text('{"version": 99, "models": {}}')
    with pytest.raises(InputError, match="not a corral catalog"):
        CatalogTruth(bad)


def test_a_catalog_metric_without_its_coefficients_is_refused_at_load(tmp_path):
    """A model's validation metric needs a, b and c (a - b / (epoch + c)): a missing one is an
    error naming the model when the catalog loads, not a KeyError at its first epoch."""
    doc = json.loads(resources.files("corral.data").joinpath("catalog.json").read_text())
    name, entry = next((n, e) for n, e in doc["models"].items() if e.get("metric"))
    del entry["metric"]["c"]
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=f"catalog entry '{name}'"):
        CatalogTruth(path)
