"""The torch-free parts of corral.train: sample stream, noise estimate, LR rules, profiler,
crash-safe files, the executor-to-job environment."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from corral.core.errors import InputError
from corral.core.jobs import BatchConfig
from corral.perf.efficiency import GradStats
from corral.perf.estimator import JobEstimator
from corral.protocol.env import JobConfig, WorkerEnv
from corral.protocol.files import atomic_write, atomic_write_json, read_json
from corral.train.lr import adascale, linear_scaling, lr_scaler, sqrt_scaling
from corral.train.noise import GradNoise
from corral.train.profiler import StepProfiler
from corral.train.stream import SampleStream


def test_stream_resumes_exactly_with_any_world_size_and_batch() -> None:
    stream = SampleStream(50, seed=4)
    # 3 steps of 1 worker x 16, then 2 workers x 8 (same total): the same samples, same order
    one = [stream.micro_batch(pos, 0, 1, 16, 0) for pos in range(0, 48, 16)]
    two = [np.concatenate([stream.micro_batch(pos, r, 2, 8, 0) for r in range(2)])
           for pos in range(0, 48, 16)]
    assert all((a == b).all() for a, b in zip(one, two))
    # a pass is a permutation; steps may span passes; the seed fixes everything
    assert sorted(stream.indices(0, 50)) == list(range(50))
    assert (stream.indices(45, 10)[5:] == stream.permutation(1)[:5]).all()
    assert not (stream.permutation(0) == stream.permutation(1)).all()
    assert (SampleStream(50, seed=4).indices(30, 40) == stream.indices(30, 40)).all()
    # accumulation micro-steps come after all workers' previous micro-batches
    assert (stream.micro_batch(0, 1, 2, 4, 1) == stream.indices(12, 4)).all()


def test_noise_estimate_recovers_known_statistics() -> None:
    rng = np.random.default_rng(0)
    dim, m0, local, workers = 200, 8, 32, 4
    g = rng.normal(size=dim) * 0.3
    sigma2 = 4.0  # per-example variance per coordinate: tr(Sigma) = dim * sigma2
    noise = GradNoise(smoothing=0.99)
    for _ in range(400):
        samples = g + rng.normal(scale=math.sqrt(sigma2 / local), size=(workers, dim))
        local_sqr = float((samples ** 2).sum(1).mean())
        total_sqr = float((samples.mean(0) ** 2).sum())
        noise.update(local_sqr, total_sqr, workers, workers * local / m0)
    stats = noise.stats
    assert stats.sqr == pytest.approx(float(g @ g), rel=0.1)
    assert stats.var == pytest.approx(dim * sigma2 / m0, rel=0.1)
    restored = GradNoise()
    restored.load_state_dict(noise.state_dict())
    assert restored.stats == stats
    assert GradNoise().stats is None
    with pytest.raises(ValueError):
        noise.update(1.0, 1.0, 1, 1.0)


def test_lr_rules() -> None:
    stats = GradStats(sqr=1.0, var=3.0)
    assert adascale(32, 128, stats) == pytest.approx((3 + 1) / (3 / 4 + 1))
    assert adascale(32, 128, None) == pytest.approx(4.0)  # no statistics: perfect scaling
    assert sqrt_scaling(32, 128, stats) == pytest.approx(2.0)
    assert linear_scaling(32, 128, stats) == pytest.approx(4.0)
    assert lr_scaler("sqrt") is sqrt_scaling
    custom = lambda m0, m, s: 1.5  # noqa: E731 - a pluggable rule
    assert lr_scaler(custom) is custom
    with pytest.raises(InputError, match="unknown lr rule 'legw'"):
        lr_scaler("legw")


def test_profiler_records_the_step_time_without_accumulation() -> None:
    est = JobEstimator(32, 256, 4, 64)
    prof = StepProfiler(est)
    prof.record(1, 2, BatchConfig(16, 0), 0.5, 0.1)  # the first step is not profiled
    assert not est.has_observations
    prof.record(1, 2, BatchConfig(16, 2), 0.9, 0.3)  # 3 micro-steps: T_grad = 0.2
    count, step_s, sync_s = est.profile()[(1, 2, 16)]
    assert (count, step_s, sync_s) == (1, pytest.approx(0.5), pytest.approx(0.3))
    prof.skip_next()
    prof.record(1, 2, BatchConfig(16, 0), 9.0, 0.0)
    assert est.profile()[(1, 2, 16)][0] == 1


def test_atomic_write_keeps_the_old_file_when_the_writer_fails(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    atomic_write_json(path, {"v": 1})

    def crash(f) -> None:
        f.write(b'{"v": 2')
        raise KeyboardInterrupt  # killed mid-write

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, crash)
    assert read_json(path) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary left
    path.write_text("{torn")
    assert read_json(path) is None and read_json(tmp_path / "missing") is None


def test_reports_replace_atomically_without_the_fsyncs_checkpoints_pay(tmp_path: Path,
                                                                        monkeypatch) -> None:
    import os

    from corral.protocol.report import Report, Reporter
    syncs = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (syncs.append(fd), real(fd))[1])
    atomic_write_json(tmp_path / "durable.json", {"v": 1})
    assert len(syncs) == 2  # the file and its directory
    reporter = Reporter(tmp_path / "report.json", interval_s=1.0)
    reporter.write(Report(steps=3))
    reporter.write(Report(steps=4))
    assert len(syncs) == 2 and Report.read(tmp_path / "report.json").steps == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["durable.json", "report.json"]


def test_job_config_and_worker_env_round_trip() -> None:
    cfg = JobConfig(job_id="j", init_bsz=64, batch=(16, 1), launch=3)
    env = {"CORRAL_JOB_CONFIG": cfg.to_json()}
    assert JobConfig.from_env(env) == cfg and JobConfig.from_env({}) is None
    worker = WorkerEnv(rank=1, world_size=4, local_rank=1, local_world_size=4, master_port=1234)
    assert WorkerEnv.from_env(worker.to_env()) == worker
    assert WorkerEnv.from_env({}).world_size == 1
