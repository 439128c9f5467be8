"""Stop-and-resume of real worker processes: exact continuation with another world size and
per-worker batch, and fallback to the previous checkpoint when the newest is damaged."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from corral.executors.procs import free_port  # noqa: E402
from corral.protocol.env import ENV_CONFIG, STOP_EXIT_CODE, JobConfig, WorkerEnv  # noqa: E402
from corral.train.checkpoint import CheckpointStore  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forked import Worker  # noqa: E402  (workers forked from one torch import)

# one xdist group: the module fixture (an uninterrupted reference run) runs once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("train_resume")]

JOB = Path(__file__).resolve().parent / "tiny_job.py"
TIMEOUT_S = 90


def run_job(k: int, config: JobConfig, *args: str) -> list[tuple[int, str]]:
    """Run tiny_job.py on k workers on the CPU (gloo, rendezvous on 127.0.0.1); (status,
    output) each. The backend is named: standalone workers on a machine with one GPU would
    all take cuda:0 with nccl, which refuses two ranks on one device."""
    port = free_port()
    procs = []
    for rank in range(k):
        env = {**os.environ, ENV_CONFIG: config.to_json(), "OMP_NUM_THREADS": "1",
               **WorkerEnv(rank=rank, world_size=k, local_rank=rank, local_world_size=k,
                           master_port=port, backend="gloo").to_env()}
        procs.append(Worker(JOB, args, env))
    return finish(procs)


def finish(procs: list[Worker]) -> list[tuple[int, str]]:
    """(status, output) of each process; any still running after TIMEOUT_S is killed."""
    out = []
    try:
        for p in procs:
            text, _ = p.communicate(timeout=TIMEOUT_S)
            out.append((p.returncode, text))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The uninterrupted run: one worker, batch 16, three epochs."""
    out = tmp_path_factory.mktemp("ref") / "w.json"
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, batch=(16, 0))
    [(code, text)] = run_job(1, config, "--out", str(out))
    assert code == 0, text
    return json.loads(out.read_text())


def test_resume_on_two_workers_continues_exactly(reference: dict, tmp_path: Path) -> None:
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, checkpoint_dir=str(tmp_path))
    [(code, text)] = run_job(1, config.replace(batch=(16, 0)), "--stop-at-step", "10")
    assert code == STOP_EXIT_CODE, text
    out = tmp_path / "w.json"
    results = run_job(2, config.replace(batch=(8, 0), launch=1), "--out", str(out))
    assert [c for c, _ in results] == [0, 0], results
    resumed = json.loads(out.read_text())
    assert resumed["resumed"]["steps"] == 11  # the signal is acted on at the next step
    assert resumed["steps"] == reference["steps"]
    assert resumed["progress"] == pytest.approx(reference["progress"])
    for a, b in zip(resumed["weights"], reference["weights"]):
        assert a == pytest.approx(b, abs=1e-5)
    assert resumed["noise_updates"] > 0  # two replicas: the across-replica estimate


def test_truncated_newest_checkpoint_falls_back_to_the_previous(reference: dict,
                                                                tmp_path: Path) -> None:
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, batch=(16, 0),
                       checkpoint_dir=str(tmp_path))
    [(code, text)] = run_job(1, config, "--stop-at-step", "20")
    assert code == STOP_EXIT_CODE, text
    store = CheckpointStore(tmp_path)
    newest, previous = store.checkpoints()
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # torn on disk
    out = tmp_path / "w.json"
    [(code, text)] = run_job(1, config.replace(launch=1), "--out", str(out))
    assert code == 0, text
    assert "does not load" in text and newest.name in text
    resumed = json.loads(out.read_text())
    assert resumed["resumed"]["checkpoint"] == previous.name
    assert resumed["resumed"]["steps"] == 13  # the end of epoch 1 (200 samples / 16 per step)
    assert resumed["steps"] == reference["steps"]
    for a, b in zip(resumed["weights"], reference["weights"]):
        assert a == pytest.approx(b, abs=1e-5)
    assert (tmp_path / (newest.name + ".corrupt")).exists()


def test_adaptive_resume_with_adam_changes_batch_and_keeps_counting(tmp_path: Path) -> None:
    config = JobConfig(init_bsz=16, max_bsz=64, min_local_bsz=4, max_local_bsz=32, adaptive=True,
                       lr_rule="sqrt", checkpoint_dir=str(tmp_path))
    [(code, text)] = run_job(1, config, "--adam", "--stop-at-step", "15")
    assert code == STOP_EXIT_CODE, text
    out = tmp_path / "w.json"
    results = run_job(2, config.replace(launch=1), "--adam", "--out", str(out))
    assert [c for c, _ in results] == [0, 0], results
    doc = json.loads(out.read_text())
    assert doc["resumed"]["steps"] == 16 and doc["steps"] > 16 and doc["epoch"] == 3
    assert doc["grad"] is not None and doc["configs"] >= 2  # profiled on 1 and on 2 workers
