"""Per-model facts beside the profiles (issue 44, item 5): data in Sia's layout runs with Sia's
restart pauses and slowdowns, data in Pollux's layout with Pollux's one 30 s pause and its
measured speed; `--restart-delay` sets one pause for every model."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from corral.cli.main import app as cli
from corral.core import Cluster
from corral.policies import create_policy
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.loop.mechanism import CheckpointRestart, mechanism_named
from corral.sim.truth.model_facts import POLLUX, SIA, ModelFacts, model_facts
from corral.sim.truth.profiles import ProfileTruth
from corral.sim.workloads import Workload
from corral.sim.workloads.common import make_job

PLACEMENTS = "placement,local_bsz,step_time,sync_time\n1,16,0.1,0\n1,32,0.2,0\n2,16,0.15,0.05\n"
SCALABILITY = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,4,16,0.2,0.1\n2,4,32,0.3,0.1\n"


def _model(root, name: str, gpu_type: str = "") -> None:
    """A model folder in Pollux's layout (`gpu_type` "": plain files) or Sia's (per-type files)."""
    d = root / name
    d.mkdir(parents=True)
    suffix = f"-{gpu_type}" if gpu_type else ""
    (d / f"placements{suffix}.csv").write_text(PLACEMENTS)
    (d / f"scalability{suffix}.csv").write_text(SCALABILITY)
    for bsz in (32, 64):
        (d / f"validation-{bsz}.csv").write_text("progress,iteration,metric,grad_sqr,grad_var\n" + "".join(
            f"{1000 * (e + 1)},{e},{0.5 + e / 10},1.0,{bsz / 8}\n" for e in range(3)))


def test_built_in_facts_name_each_layouts_figures():
    assert model_facts(SIA, "cifar10") == ModelFacts(50.0, 1.8)
    assert model_facts(SIA, "imagenet") == ModelFacts(250.0, 1.2)
    assert model_facts(SIA, "ncf") == ModelFacts(15.0, 1.5)
    assert model_facts(SIA, "gpt3") == ModelFacts(30.0, 1.0)  # a model Sia does not name
    for model in ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "other"):
        assert model_facts(POLLUX, model) == ModelFacts(30.0, 1.0)
    assert model_facts(POLLUX, "yolov3") == ModelFacts(30.0, 1.0, max_local_bsz=8)
    with pytest.raises(ValueError, match="unknown profile layout 'gavel'"):
        model_facts("gavel", "cifar10")


def test_sia_layout_slows_every_types_steps_pollux_layout_keeps_them(tmp_path):
    _model(tmp_path / "pollux", "cifar10")
    _model(tmp_path / "sia", "cifar10", "v100")
    (tmp_path / "sia" / "cifar10" / "placements-k80.csv").write_text(PLACEMENTS)
    (tmp_path / "sia" / "cifar10" / "scalability-k80.csv").write_text(SCALABILITY)
    pollux = ProfileTruth(tmp_path / "pollux").app("cifar10")
    sia = ProfileTruth(tmp_path / "sia").app("cifar10")
    assert (pollux.layout, pollux.restart_s, pollux.slowdown) == (POLLUX, 30.0, 1.0)
    assert (sia.layout, sia.restart_s, sia.slowdown) == (SIA, 50.0, 1.8)
    assert pollux.step_time((1, 1), 16) == pytest.approx((0.15, 0.05))
    for view in (sia, sia.for_type("v100")):  # its own type (k80) and another
        assert view.step_time((1, 1), 16) == pytest.approx((0.15 * 1.8, 0.05 * 1.8))
        assert view.step_time((2, 2), 16) == pytest.approx((0.2 * 1.8, 0.1 * 1.8))  # unlisted
    assert sia.for_type("v100").restart_s == 50.0
    assert ProfileTruth(tmp_path / "sia").restart_times() == {"cifar10": 50.0}


def test_mechanism_charges_each_models_pause_unless_pinned():
    from corral.core.cluster import Placement

    start = (Placement.of({}), Placement.of({0: 1}))
    own = CheckpointRestart().for_models({"imagenet": 250.0})
    assert own.pause_s("imagenet", *start) == 250.0 and own.pause_s("bert", *start) == 30.0
    assert own.pause_s("imagenet", Placement.of({0: 1}), Placement.of({0: 2})) == 250.0
    assert own.start_s() == 250.0 and "imagenet 250 s" in own.describe()
    pinned = mechanism_named("checkpoint-restart", 30.0).for_models({"imagenet": 250.0})
    assert pinned.pause_s("imagenet", *start) == 30.0 and pinned.describe() == "checkpoint-restart"
    sidecar = mechanism_named("sidecar")
    assert sidecar.for_models({"imagenet": 250.0}) is sidecar


def _jct(root, cluster: str, mechanism=None) -> float:
    truth = ProfileTruth(root)
    spec = make_job("c-0", 0.0, "cifar10", truth.limits()["cifar10"], gpus=1, batch_size=32)
    config = EngineConfig(mechanism=mechanism or CheckpointRestart())
    result = Simulator(truth, create_policy("fifo"), Cluster.parse(cluster), config).run(
        Workload("one", [spec], "test"))
    jct = result.jobs[0].jct_s
    assert jct is not None
    return jct


def test_simulator_runs_each_layout_with_its_publishers_settings(tmp_path):
    _model(tmp_path / "pollux", "cifar10")
    _model(tmp_path / "sia", "cifar10", "v100")
    pollux = _jct(tmp_path / "pollux", "1x4")
    train = pollux - 30.0  # one start, then training alone
    assert train > 100
    assert _jct(tmp_path / "sia", "v100:1x4") == pytest.approx(50.0 + 1.8 * train, rel=1e-6)
    pinned = mechanism_named("checkpoint-restart", 30.0)  # --restart-delay 30
    assert _jct(tmp_path / "sia", "v100:1x4", pinned) == pytest.approx(30.0 + 1.8 * train, rel=1e-6)
    assert _jct(tmp_path / "pollux", "1x4", pinned) == pollux


def _avg_jct(output: str) -> float:
    row = next(line for line in output.splitlines() if line.lstrip("│ ").startswith("fifo"))
    return float(re.findall(r"[\d,]+\.?\d*", row.replace("│", " "))[0].replace(",", ""))


def test_cli_restart_delay_overrides_every_models_pause(tmp_path):
    _model(tmp_path / "sia", "cifar10", "v100")
    workload = tmp_path / "w.csv"
    workload.write_text("name,time,application,num_replicas,batch_size\nc-0,0,cifar10,1,32\n")
    runner = CliRunner()
    base = ["simulate", "-p", "fifo", "-w", str(workload), "--profiles", str(tmp_path / "sia"),
            "--cluster", "v100:1x4", "-j", "1", "--no-lp-bound", "--wide"]
    own = runner.invoke(cli, base)
    assert own.exit_code == 0, own.output
    # the header wraps at the console's width wherever the (temporary) path puts it
    assert "restart pause per model: cifar10 50 s" in " ".join(own.output.split())
    pinned = runner.invoke(cli, [*base, "--restart-delay", "30"])
    assert pinned.exit_code == 0, pinned.output
    assert "restart pause per model" not in pinned.output
    assert _avg_jct(own.output) - _avg_jct(pinned.output) == pytest.approx(20.0, abs=0.6)
    bad = runner.invoke(cli, [*base, "--restart-delay", "-1"])
    assert bad.exit_code != 0 and "--restart-delay >= 0" in bad.output
    assert "Traceback" not in bad.output


def test_emulated_executor_charges_the_same_pauses_as_the_simulator(tmp_path):
    from corral.core.cluster import Placement
    from corral.executors.emulated.executor import EmulatedExecutor

    _model(tmp_path / "sia", "cifar10", "v100")
    start = (Placement.of({}), Placement.of({0: 1}))
    own = EmulatedExecutor(tmp_path / "own", cluster="v100:1x4", profiles=tmp_path / "sia",
                           time_scale=5000)
    pinned = EmulatedExecutor(tmp_path / "pinned", cluster="v100:1x4", profiles=tmp_path / "sia",
                              time_scale=5000, restart_delay_s=30.0)
    try:
        assert own.mechanism.pause_s("cifar10", *start) == 50.0
        assert pinned.mechanism.pause_s("cifar10", *start) == 30.0
    finally:
        own.shutdown()
        pinned.shutdown()


def test_serve_takes_restart_delay_only_for_the_emulated_executor(tmp_path):
    import corral.cli.live  # noqa: F401 - registers `serve`

    result = CliRunner().invoke(cli, ["serve", "--executor", "local", "--restart-delay", "30",
                                      "--data-dir", str(tmp_path)])
    assert result.exit_code != 0 and "--restart-delay need(s) --executor emulated" in result.output
    assert "Traceback" not in result.output


def test_yolov3_is_capped_at_8_per_gpu_in_pollux_layout_only(tmp_path):
    _model(tmp_path / "pollux", "yolov3")
    _model(tmp_path / "sia", "yolov3", "v100")
    assert model_facts(POLLUX, "yolov3").max_local_bsz == 8
    assert model_facts(SIA, "yolov3").max_local_bsz is None
    assert ProfileTruth(tmp_path / "pollux").limits()["yolov3"].max_local_bsz == 8
    assert ProfileTruth(tmp_path / "sia").limits()["yolov3"].max_local_bsz == 32  # profiles' largest
