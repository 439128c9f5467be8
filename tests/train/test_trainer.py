"""ElasticTrainer in this process (one worker): accumulation, adaptive batch, LR rules,
estimator feeding, reports and checkpoint contents."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)  # tiny models: threads only contend on a busy 2-core machine

from corral.perf.estimator import JobEstimator  # noqa: E402
from corral.protocol.env import ENV_CONFIG, JobConfig  # noqa: E402
from corral.train import ElasticTrainer  # noqa: E402
from corral.train.checkpoint import CheckpointStore  # noqa: E402


@pytest.fixture(autouse=True)
def _keep_sigterm(monkeypatch: pytest.MonkeyPatch):
    """The trainer installs a SIGTERM handler; give the test process its own back."""
    old = signal.getsignal(signal.SIGTERM)
    for var in ("RANK", "WORLD_SIZE", ENV_CONFIG, "CORRAL_CHECKPOINT_DIR"):
        monkeypatch.delenv(var, raising=False)
    yield
    signal.signal(signal.SIGTERM, old)


def _data(n: int = 96):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, 4, generator=g)
    y = (x.sum(1) > 0).long()
    return torch.utils.data.TensorDataset(x, y)


def _train(monkeypatch, config: JobConfig | None, epochs: int = 2, **kwargs):
    if config is not None:
        monkeypatch.setenv(ENV_CONFIG, config.to_json())
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = ElasticTrainer(model, opt, _data(), batch_size=16, **kwargs)
    for _ in trainer.epochs(epochs):
        for x, y in trainer.batches():
            trainer.backward(F.cross_entropy(model(x), y))
    return trainer, torch.cat([p.detach().flatten() for p in model.parameters()])


def test_accumulation_gives_the_same_update_as_one_large_batch(monkeypatch) -> None:
    base = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16)
    t1, w1 = _train(monkeypatch, base.replace(batch=(16, 0)))
    t2, w2 = _train(monkeypatch, base.replace(batch=(8, 1)))
    assert t1.steps == t2.steps == 12  # 2 epochs of 96 samples at 16 per step
    assert t1.samples == t2.samples == 192
    assert torch.allclose(w1, w2, atol=1e-6)


def test_non_adaptive_job_counts_progress_in_steps(monkeypatch) -> None:
    trainer, _ = _train(monkeypatch, None, epochs=3)
    assert trainer.progress == pytest.approx(trainer.steps) and trainer.epoch == 3
    assert trainer.lr_scale == pytest.approx(1.0)


def test_job_feeds_its_estimator_and_gradient_statistics(monkeypatch) -> None:
    trainer, _ = _train(monkeypatch, None, epochs=3)
    assert trainer.noise.updates == trainer.steps - 1  # differenced: from the second step on
    stats = trainer.grad_stats
    assert stats is not None and stats.sqr >= 0 and stats.var >= 1e-6
    profile = trainer.estimator.profile()
    assert list(profile) == [(1, 1, 16)]
    count, step_s, sync_s = profile[(1, 1, 16)]
    assert 0 < count < trainer.steps and step_s > 0 and sync_s == 0  # first steps not profiled


def test_adaptive_job_grows_its_batch_and_scales_its_learning_rate(monkeypatch) -> None:
    config = JobConfig(init_bsz=16, max_bsz=64, min_local_bsz=4, max_local_bsz=64, adaptive=True,
                       lr_rule="linear")
    trainer, _ = _train(monkeypatch, config, epochs=4)
    # with a measured profile the agent picks a larger batch; the linear rule scales the LR
    assert trainer.total_bsz >= 16
    assert trainer.lr_scale == pytest.approx(trainer.total_bsz / 16)


def test_reports_and_checkpoints_hold_progress_and_the_estimator(monkeypatch, tmp_path: Path) -> None:
    ckpt, report = tmp_path / "ckpt", tmp_path / "report.json"
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, checkpoint_dir=str(ckpt),
                       report_path=str(report), report_interval_s=0.0)
    trainer, _ = _train(monkeypatch, config, epochs=2)
    doc = json.loads(report.read_text())  # as older services read it: these keys, in order
    assert list(doc) == ["time", "state", "launch", "world_size", "num_nodes", "device", "gpu_type",
                         "batch", "total_bsz", "steps", "epoch", "progress", "samples", "loss",
                         "lr_scale", "metrics", "estimator", "resumed", "first_step_time", "pid",
                         "events"]
    assert doc["state"] == "finished" and doc["steps"] == trainer.steps and doc["epoch"] == 2
    assert doc["batch"] == [16, 0] and doc["world_size"] == 1
    est = JobEstimator.from_dict(doc["estimator"])
    assert est.init_bsz == 16 and est.has_observations
    state, path = CheckpointStore(ckpt).load()
    assert state["trainer"]["steps"] == trainer.steps and state["trainer"]["finished"]
    assert len(CheckpointStore(ckpt).checkpoints()) == 2  # the newest and the previous one


def test_finished_checkpoint_makes_a_rerun_finish_at_once(monkeypatch, tmp_path: Path) -> None:
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, checkpoint_dir=str(tmp_path))
    first, w1 = _train(monkeypatch, config, epochs=2)
    again, w2 = _train(monkeypatch, config, epochs=2)
    assert again.resumed["steps"] == first.steps and again.steps == first.steps
    assert torch.equal(w1, w2)


def test_backward_must_be_called_for_every_batch(monkeypatch) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    trainer = ElasticTrainer(model, torch.optim.SGD(model.parameters(), lr=0.1), _data(),
                             batch_size=16)
    with pytest.raises(RuntimeError, match="backward"):
        for _ in trainer.epochs(1):
            for _batch in trainer.batches():
                pass
