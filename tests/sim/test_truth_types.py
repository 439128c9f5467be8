"""Ground truth per GPU type (issue 35, item 2): per-type profiles, the catalog's types derived
from Gavel's measurements, the view API and its errors; homogeneous behaviour unchanged."""

from __future__ import annotations

import json
from importlib import resources

import datafiles
import pytest

from corral.core.errors import InputError
from corral.core.jobs import JobSpec
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.truth.gpu_types import derive, speed_at
from corral.sim.truth.profiles import ProfileTruth
from corral.sim.truth.scaled import job_app

PLACEMENTS = "placement,local_bsz,step_time,sync_time\n"
SCALABILITY = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"


def _toy(root, types=("",), name="toy", step=0.1):
    """A model folder: one placements/scalability pair per type ("" = the plain files), each
    type's step time `step` x (1 + index), and two validation files."""
    d = root / name
    d.mkdir(parents=True)
    for i, t in enumerate(types):
        suffix = f"-{t}" if t else ""
        s = step * (1 + i)
        (d / f"placements{suffix}.csv").write_text(
            PLACEMENTS + f"1,16,{s},0\n1,32,{2 * s},0\n2,16,{1.5 * s},{0.5 * s}\n2,32,{2.5 * s},{0.5 * s}\n")
        (d / f"scalability{suffix}.csv").write_text(SCALABILITY + f"2,4,16,{2 * s},{s}\n2,4,32,{3 * s},{s}\n")
    for bsz in (32, 64):
        (d / f"validation-{bsz}.csv").write_text(
            "progress,iteration,metric,grad_sqr,grad_var\n" + "".join(
                f"{10 * (e + 1)},{e},{0.5 + e / 10},1.0,{bsz / 8}\n" for e in range(3)))
    return d


def test_plain_files_stay_one_unnamed_type(tmp_path):
    _toy(tmp_path)
    truth = ProfileTruth(tmp_path)
    app = truth.app("toy")
    assert truth.gpu_types("toy") == ("",) and app.gpu_type == ""
    assert app.for_type("") is app
    with pytest.raises(InputError, match=r"'toy' has no step times for GPU type 'v100'; known types: '' \(the unnamed type\)"):
        app.for_type("v100")


def test_typed_files_beside_plain_ones(tmp_path):
    _toy(tmp_path, types=("", "v100", "k80"))
    app = ProfileTruth(tmp_path).app("toy")
    assert app.gpu_types() == ("", "k80", "v100")
    assert app.step_time((1,), 16) == pytest.approx((0.1, 0.0))
    k80, v100 = app.for_type("k80"), app.for_type("v100")
    assert k80.step_time((1,), 16) == pytest.approx((0.3, 0.0))  # third pair written: 3 x
    assert v100.step_time((1,), 16) == pytest.approx((0.2, 0.0))
    assert v100.step_time((1, 1), 32) == pytest.approx((0.5, 0.1))
    assert v100.step_time((1,), 24) == pytest.approx((0.3, 0.0))  # interpolated over the batch
    assert v100.step_time((2, 2), 16)[0] == pytest.approx(0.4)  # from scalability-v100.csv
    assert app.for_type("v100") is v100  # made once, kept
    assert v100.limits == app.limits and v100.epoch_progress() == app.epoch_progress()
    assert v100.grad_stats(48, 1) == app.grad_stats(48, 1)
    assert v100.gain(64, 0) == app.gain(64, 0)
    assert v100.for_type("") is app and v100.gpu_types() == app.gpu_types()


def test_only_typed_files_the_first_type_is_the_apps_own(tmp_path):
    _toy(tmp_path, types=("v100", "k80"))  # v100 written first (1x), k80 second (2x)
    truth = ProfileTruth(tmp_path)
    app = truth.app("toy")
    assert app.gpu_type == "k80" and truth.gpu_types("toy") == ("k80", "v100")
    assert app.step_time((1,), 16) == pytest.approx((0.2, 0.0))
    assert app.for_type("") is app and app.for_type("k80") is app
    assert app.for_type("v100").step_time((1,), 16) == pytest.approx((0.1, 0.0))
    with pytest.raises(InputError, match=r"known types: 'k80', 'v100'$"):
        app.for_type("a100")


def test_type_names_in_file_names_as_users_write_them(tmp_path):
    """Sia's layout names its A100 nodes `dgx-ext` (placements-dgx-ext.csv); a name in upper
    case is the same type as a cluster's in lower case."""
    _toy(tmp_path, types=("dgx-ext", "A100-SXM4-80GB"))
    app = ProfileTruth(tmp_path).app("toy")
    assert app.gpu_types() == ("a100-sxm4-80gb", "dgx-ext")
    assert app.for_type("dgx-ext").step_time((1,), 16) == pytest.approx((0.1, 0.0))
    assert app.step_time((1,), 16) == pytest.approx((0.2, 0.0))  # its own: first by name
    d = _toy(tmp_path / "twice", types=("v100",))
    (d / "placements-V100.csv").write_text(PLACEMENTS)
    (d / "scalability-V100.csv").write_text(SCALABILITY)
    with pytest.raises(InputError, match=r"GPU type 'v100' also has files placements-V100.csv"):
        ProfileTruth(tmp_path / "twice")


def test_per_type_errors_name_the_file_and_line(tmp_path):
    d = _toy(tmp_path / "a", types=("", "v100"))
    (d / "placements-v100.csv").write_text(PLACEMENTS + "1,16,0.1,0\n1,16,x,0\n")
    with pytest.raises(InputError, match=r"placements-v100.csv:3: expected numbers"):
        ProfileTruth(tmp_path / "a").app("toy").for_type("v100")
    d = _toy(tmp_path / "b", types=("", "v100"))
    (d / "scalability-v100.csv").unlink()
    with pytest.raises(InputError, match=r"scalability-v100.csv: file not found \(needed beside placements-v100.csv"):
        ProfileTruth(tmp_path / "b")
    d = _toy(tmp_path / "c", types=("v100",))
    (d / "scalability-v100.csv").write_text(SCALABILITY + "2,4,16,-1,0\n")
    with pytest.raises(InputError, match=r"scalability-v100.csv:2: values must be finite"):
        ProfileTruth(tmp_path / "c")
    d = _toy(tmp_path / "d", types=("",))
    (d / "placements-v 100.csv").write_text(PLACEMENTS)
    with pytest.raises(InputError, match=r"placements-v 100.csv: GPU type 'v 100'"):
        ProfileTruth(tmp_path / "d")


# --- the built-in catalog -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def catalog():
    return CatalogTruth()


def test_catalog_types_and_the_unnamed_one_unchanged(catalog):
    plain = json.loads(resources.files("corral.data").joinpath("catalog.json").read_text())
    fresh = CatalogTruth.from_document(plain, "copy")  # no gpu_types.json: one unnamed type
    for name in catalog.apps():
        app = catalog.app(name)
        assert app.gpu_types() == ("", "k80", "p100", "v100")
        assert fresh.gpu_types(name) == ("",)
        assert app.for_type("") is app
        for counts, m in (((1,), 16), ((4,), 32), ((4, 4), 64), ((2, 1), 8)):
            assert app.step_time(counts, m) == fresh.app(name).step_time(counts, m)
            # the catalog's figures stand for the P100
            assert app.for_type("p100").step_time(counts, m) == pytest.approx(app.step_time(counts, m), rel=1e-12)
    with pytest.raises(InputError, match=r"'bert' has no step times for GPU type 'b200'; known types: '' \(the unnamed type\), 'k80', 'p100', 'v100', 'a100', 'h100', 'l4'"):
        catalog.app("bert").for_type("b200")


def test_catalog_type_scales_compute_not_sync(catalog):
    app = catalog.app("imagenet")
    p100, v100, k80 = (app.for_type(t) for t in ("p100", "v100", "k80"))
    assert k80.step_time((1,), 64)[0] > p100.step_time((1,), 64)[0] > v100.step_time((1,), 64)[0]
    # on one GPU there is no sync; across nodes the sync part stays, so a faster GPU scales worse
    for view in (p100, v100, k80):
        assert view.step_time((1,), 64)[1] == 0.0
    speedup = {t: app.for_type(t).step_time((1,), 64)[0] / app.for_type(t).step_time((4, 4), 64)[0] * 8
               for t in ("k80", "p100", "v100")}
    assert speedup["k80"] > speedup["p100"] > speedup["v100"]
    ncf = catalog.app("ncf")
    assert ncf.for_type("v100").step_time((1,), 2048)[0] > ncf.for_type("p100").step_time((1,), 2048)[0]


def test_speed_interpolates_over_log_batch_and_holds_at_the_ends():
    pts = [[16, 1.0], [64, 2.0]]
    assert speed_at(pts, 8) == 1.0 and speed_at(pts, 128) == 2.0
    assert speed_at(pts, 32) == pytest.approx(1.5)


def test_scaled_app_keeps_its_factor_across_types(catalog):
    spec = JobSpec("j", 0.0, "cifar10", 4, 512, 128, 4096, 32, 256, trace_duration_s=3600.0)
    scaled = job_app(catalog, spec, 4)
    v100 = scaled.for_type("v100")
    assert v100.factor == scaled.factor and v100.epoch_progress() == scaled.epoch_progress()
    assert v100.step_time((4,), 128) == catalog.app("cifar10").for_type("v100").step_time((4,), 128)
    assert scaled.for_type("v100") is v100 and scaled.for_type("") is scaled
    assert scaled.gpu_types() == ("", "k80", "p100", "v100")


# --- the shipped figures against Gavel's file ----------------------------------------------------

@pytest.fixture(scope="module")
def gavel_solo():
    path = datafiles.need("gavel-throughputs")
    data = json.loads(path.read_text())
    return path, {t: {k: v["null"] for k, v in data[t].items()} for t in ("k80", "p100", "v100")}


def test_shipped_figures_are_derived_from_gavels_file(gavel_solo):
    path, _ = gavel_solo
    shipped = json.loads(resources.files("corral.data").joinpath("gpu_types.json").read_text())
    assert shipped == derive(path)


@pytest.mark.parametrize("model,job_type,bsz", [
    ("imagenet", "ResNet-50 (batch size 64)", 64),  # 7.1x K80 -> V100
    ("deepspeech2", "LM (batch size 20)", 20),  # 3.8x
    ("ncf", "Recommendation (batch size 2048)", 2048),  # V100 below P100
    ("cifar10", "ResNet-18 (batch size 128)", 128),
    ("bert", "Transformer (batch size 64)", 64),
])
def test_catalog_ratios_reproduce_gavels(catalog, gavel_solo, model, job_type, bsz):
    _, solo = gavel_solo
    key = str((job_type, 1))
    app = catalog.app(model)
    for a, b in (("v100", "k80"), ("v100", "p100"), ("p100", "k80")):
        gavel = solo[a][key] / solo[b][key]
        ours = app.for_type(b).step_time((1,), bsz)[0] / app.for_type(a).step_time((1,), bsz)[0]
        assert ours == pytest.approx(gavel, rel=1e-3), (model, a, b)
    if model == "imagenet":
        assert round(app.for_type("k80").step_time((1,), 64)[0] / app.for_type("v100").step_time((1,), 64)[0], 1) == 7.1
