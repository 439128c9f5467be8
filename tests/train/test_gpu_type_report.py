"""The GPU type a corral.train job runs on: named from the device (or the executor), carried by
every report and by the estimator's steps; a job resumed on another type re-chooses its batch
for that type."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from corral.protocol.env import ENV_GPU_TYPE
from corral.protocol.report import gpu_type_name

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)  # tiny models: threads only contend on a busy 2-core machine

from corral.perf.agent import choose_batch  # noqa: E402
from corral.perf.estimator import JobEstimator  # noqa: E402
from corral.protocol.env import ENV_CONFIG, JobConfig  # noqa: E402
from corral.protocol.report import Report  # noqa: E402
from corral.train import ElasticTrainer  # noqa: E402
from corral.train.device import gpu_type_of  # noqa: E402


@pytest.mark.parametrize(("device_name", "gpu_type"), [
    ("NVIDIA A100-SXM4-40GB", "a100"),
    ("NVIDIA A100 80GB PCIe", "a100"),
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "a100"),
    ("Tesla V100-SXM2-16GB", "v100"),
    ("Tesla V100-PCIE-32GB", "v100"),
    ("Tesla K80", "k80"),
    ("Tesla T4", "t4"),
    ("Tesla P100-PCIE-16GB", "p100"),
    ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA H100 NVL", "h100"),
    ("NVIDIA GeForce RTX 2080 Ti", "rtx2080ti"),
    ("GeForce RTX 2080 Ti", "rtx2080ti"),
    ("NVIDIA GeForce GTX 1080 Ti", "gtx1080ti"),
    ("NVIDIA RTX A6000", "rtxa6000"),
    ("NVIDIA TITAN V", "titanv"),
    ("NVIDIA A10G", "a10g"),
    ("NVIDIA L4", "l4"),
    ("", ""),
    ("NVIDIA", ""),
])
def test_device_names_map_to_short_type_names(device_name: str, gpu_type: str) -> None:
    assert gpu_type_name(device_name) == gpu_type


def test_type_names_are_valid_cluster_type_names() -> None:
    from corral.core.cluster import gpu_type_problem
    for name in ("NVIDIA A100-SXM4-40GB", "Quadro RTX 6000", "Weird (GPU) #1 / x_y",
                 "NVIDIA RTX 6000 Ada Generation", "X" * 80):
        t = gpu_type_name(name)
        assert gpu_type_problem(t) is None, (name, t)


def test_the_executors_type_wins_and_the_cpu_has_none() -> None:
    cpu = torch.device("cpu")
    assert gpu_type_of(cpu, {}) == ""
    assert gpu_type_of(cpu, {ENV_GPU_TYPE: ""}) == ""
    assert gpu_type_of(cpu, {ENV_GPU_TYPE: "v100"}) == "v100"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU: the type is read from the device's name")
def test_on_a_gpu_the_executors_type_wins_even_the_unnamed_one() -> None:
    gpu = torch.device("cuda", 0)
    assert gpu_type_of(gpu, {}) == gpu_type_name(torch.cuda.get_device_name(gpu))
    assert gpu_type_of(gpu, {ENV_GPU_TYPE: "v100"}) == "v100"
    assert gpu_type_of(gpu, {ENV_GPU_TYPE: ""}) == ""  # a cluster without types


# ------------------------------------------------------------------- the trainer (in-process)

@pytest.fixture(autouse=True)
def _keep_sigterm(monkeypatch: pytest.MonkeyPatch):
    """The trainer installs a SIGTERM handler; give the test process its own back."""
    old = signal.getsignal(signal.SIGTERM)
    for var in ("RANK", "WORLD_SIZE", ENV_CONFIG, "CORRAL_CHECKPOINT_DIR", ENV_GPU_TYPE):
        monkeypatch.delenv(var, raising=False)
    yield
    signal.signal(signal.SIGTERM, old)


def _data(n: int = 96, noisy: bool = False):
    """Labels from the inputs, or (`noisy`) at random: gradients mostly noise, so a large
    batch is worth its cost."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, 4, generator=g)
    y = torch.randint(0, 2, (n,), generator=g) if noisy else (x.sum(1) > 0).long()
    return torch.utils.data.TensorDataset(x, y)


def _trainer(monkeypatch, config: JobConfig, noisy: bool = False, **kwargs) -> ElasticTrainer:
    monkeypatch.setenv(ENV_CONFIG, config.to_json())
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    return ElasticTrainer(model, torch.optim.SGD(model.parameters(), lr=0.1),
                          _data(noisy=noisy), batch_size=16, **kwargs)


def _run(trainer: ElasticTrainer, epochs: int) -> None:
    for _ in trainer.epochs(epochs):
        for x, y in trainer.batches():
            trainer.backward(F.cross_entropy(trainer.model(x), y))


def test_a_report_carries_the_type_and_its_steps_are_that_types(monkeypatch,
                                                                 tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    monkeypatch.setenv(ENV_GPU_TYPE, "v100")
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, report_path=str(report),
                       report_interval_s=0.0)
    trainer = _trainer(monkeypatch, config, device="cpu")
    assert trainer.gpu_type == "v100"
    _run(trainer, 2)
    doc = Report.read(report)
    assert doc is not None and doc.state == "finished" and doc.gpu_type == "v100"
    assert doc.estimator is not None
    est = JobEstimator.from_dict(dict(doc.estimator))
    assert est.gpu_type == "v100" and est.gpu_types() == ("v100",)
    assert list(est.profile("v100")) == [(1, 1, 16)] and est.profile("") == {}


def test_on_the_cpu_without_a_type_the_report_says_the_unnamed_one(monkeypatch,
                                                                   tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, report_path=str(report),
                       report_interval_s=0.0)
    _run(_trainer(monkeypatch, config, device="cpu"), 1)
    doc = Report.read(report)
    assert doc is not None and doc.estimator is not None
    assert doc.gpu_type == "" and "gpu_type" not in doc.estimator  # as before types
    assert JobEstimator.from_dict(dict(doc.estimator)).gpu_types() == ("",)


def test_a_job_resumed_on_another_type_rechooses_its_batch_for_it(monkeypatch,
                                                                  tmp_path: Path) -> None:
    config = JobConfig(init_bsz=16, max_bsz=64, min_local_bsz=4, max_local_bsz=64,
                       adaptive=True, lr_rule="linear", checkpoint_dir=str(tmp_path / "ckpt"))
    monkeypatch.setenv(ENV_GPU_TYPE, "k80")
    first = _trainer(monkeypatch, config, noisy=True, device="cpu")
    # what a policy would seed: a one-GPU a100 profile, far faster at a large batch
    first.estimator.bootstrap("a100", 0.0005, 64)
    _run(first, 4)
    assert first.estimator.gpu_types() == ("a100", "k80")
    held = first.batch  # within the controller's hold: the initial batch still
    k80_profile = first.estimator.profile("k80")
    # the job is moved to a100 nodes: it resumes from its checkpoint (more epochs to go)
    monkeypatch.setenv(ENV_GPU_TYPE, "a100")
    moved = _trainer(monkeypatch, config, noisy=True, device="cpu")
    assert moved.resumed is not None and moved.gpu_type == "a100"
    assert moved.batch_control.gpu_type == "a100"
    # chosen afresh from the a100 model, not held as it was on k80
    assert moved.batch == choose_batch(moved.estimator, 1, 1, gpu_type="a100") != held
    assert moved.estimator.profile("k80") == k80_profile  # what it learned of k80 stays
    _run(moved, 6)
    assert set(moved.estimator.gpu_types()) == {"k80", "a100"}
    assert len(moved.estimator.profile("a100")) > 1  # its own steps besides the profile
    assert moved.estimator.gpu_type == "a100" and moved.estimator.profile("a100")
    assert moved.estimator.profile("k80") == k80_profile


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU: the type is read from the device's name")
def test_on_a_gpu_the_type_is_the_devices(monkeypatch, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, report_path=str(report),
                       report_interval_s=0.0)
    trainer = _trainer(monkeypatch, config, device="cuda")
    expected = gpu_type_name(torch.cuda.get_device_name(trainer.device))
    assert expected and trainer.gpu_type == expected
    _run(trainer, 1)
    assert Report.read(report).gpu_type == expected
