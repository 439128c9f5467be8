"""corral.train and the live service on a real GPU: the device everywhere, DDP statistics on
nccl, mixed precision, and `corral serve --gpus 0` running the adaptive example and the plain
script to their accuracy targets, with a preemption under tiresias-las and a resume from the
checkpoint on the GPU. Skipped (with the reason) where torch sees no CUDA device."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("uvicorn")

import livecluster as live  # noqa: E402

TARGET = 0.95
JOB_TIMEOUT_S = 300
DIGITS = dict(adaptive=True, batch_size=32, max_batch_size=256, max_local_bsz=64,
              min_local_bsz=8)


def test_standalone_trainer_uses_cuda_0_and_keeps_everything_there(tmp_path: Path) -> None:
    import signal

    import torch.nn.functional as F

    from corral.train import ElasticTrainer

    old = signal.getsignal(signal.SIGTERM)
    try:
        torch.manual_seed(0)
        x = torch.randn(256, 8)
        data = torch.utils.data.TensorDataset(x, (x.sum(1) > 0).long())
        model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        trainer = ElasticTrainer(model, opt, data, batch_size=32, max_batch_size=128,
                                 precision="bf16", checkpoint_dir=str(tmp_path))
        assert trainer.device == torch.device("cuda", 0)
        for _ in trainer.epochs(3):
            for xb, yb in trainer.batches():
                assert xb.device == trainer.device and yb.device == trainer.device
                with trainer.autocast():
                    loss = F.cross_entropy(trainer.model(xb), yb)
                trainer.backward(loss)
        assert trainer.noise.ema.device.type == "cuda" and trainer.grad_stats is not None
        assert trainer.fetcher.prefetch_hits > 0  # the next batch was on its way
    finally:
        signal.signal(signal.SIGTERM, old)


def test_the_fetcher_prefetches_on_a_side_stream_and_works_again_after_close() -> None:
    import numpy as np

    from corral.train.data import BatchFetcher

    x = torch.arange(64, dtype=torch.float32).view(32, 2)
    data = torch.utils.data.TensorDataset(x, torch.arange(32))
    fetcher = BatchFetcher(data, torch.device("cuda", 0))
    first, second = np.arange(0, 8), np.arange(8, 16)
    xb, yb = fetcher.fetch(first, second)
    assert xb.device == torch.device("cuda", 0) and yb.tolist() == list(range(8))
    xb, yb = fetcher.fetch(second)
    assert fetcher.prefetch_hits == 1 and yb.tolist() == list(range(8, 16))
    fetcher.close()  # as finish() does; training on afterwards starts another prefetch thread
    xb, yb = fetcher.fetch(first, second)
    assert yb.tolist() == list(range(8)) and fetcher.fetch(second)[1].tolist() == list(range(8, 16))
    assert fetcher.prefetch_hits == 2
    fetcher.close()


@pytest.fixture
def gpu_service(tmp_path: Path):
    started = []

    def make(policy: str, *settings: str) -> live.LiveService:
        svc = live.LiveService(tmp_path / f"data-{len(started)}", policy, gpus="0",
                               extra_args=settings)
        svc.data_dir.mkdir(parents=True, exist_ok=True)
        started.append(svc)
        return svc.start()

    yield make
    for svc in started:
        svc.close()


def test_adaptive_example_trains_on_the_gpu_under_pollux(gpu_service) -> None:
    svc = gpu_service("pollux", "--set", "restart_penalty_s=1")
    job = svc.submit("digits_elastic.py", "--epochs", "6", **DIGITS)
    [done] = svc.wait_all_done([job], JOB_TIMEOUT_S)
    assert done["metric"] >= TARGET
    assert live.final_accuracy(svc.client.logs(job)) >= TARGET
    assert "device=cuda:0" in svc.client.logs(job)
    assert svc.job(job)["report"]["device"] == "cuda:0"


def test_preempted_jobs_resume_from_checkpoints_on_the_gpu(gpu_service) -> None:
    svc = gpu_service("tiresias-las", "--set", "threshold_gpu_h=0.001")
    # long enough to be running when it is demoted: on an H100, 10 epochs took 9 s and the job
    # was done before its preemption came (second GPU run, 2026-11-27)
    first = svc.submit("digits_elastic.py", "--epochs", "40", **DIGITS)
    svc.wait_training(first, 120, steps=20)
    plain = svc.submit("plain_sigterm.py", "--epochs", "10", gpus=1)
    jobs = svc.wait_all_done([first, plain], JOB_TIMEOUT_S)
    logs = {j["id"]: svc.client.logs(j["id"]) for j in jobs}
    for log in logs.values():
        assert live.final_accuracy(log) >= TARGET
    assert "training on cuda:0" in logs[plain]
    # the first job was preempted when it was demoted, and resumed from its checkpoint
    assert "resumed from ckpt-" in logs[first] and "device=cuda:0" in logs[first], logs[first]
