"""The local executor: the shared executor contract, plus what is specific to local processes."""

from __future__ import annotations

from pathlib import Path

import contract  # noqa: E402  (this folder is on sys.path: conftest.py)
import pytest

from corral.core.errors import InputError
from corral.executors import create_executor, executor_names
from corral.executors.local import LocalExecutor
from corral.executors.procs import is_job_worker
from corral.executors.slots import SlotPool, detect_gpus


class TestLocalExecutorContract(contract.ExecutorContract):
    @pytest.fixture
    def make_executor(self):
        def make(data_dir: Path, slots: int, max_retries: int) -> LocalExecutor:
            return LocalExecutor(data_dir, slots=slots, max_retries=max_retries,
                                 stop_timeout_s=10, crash_grace_s=1, poll_s=0.02)
        return make


def test_cpu_slots_and_worker_environment(tmp_path: Path) -> None:
    ex = LocalExecutor(tmp_path, slots=2)
    try:
        assert not ex.pool.gpu and ex.cluster().total_gpus == 2
        job = contract.launch("cpu", "finish")
        ex.place(job, contract.plan(2))
        ex.wait_for("cpu", contract.END, contract.TIMEOUT_S)
        lines = contract.env_lines(ex, "cpu")
        assert {l["CUDA_VISIBLE_DEVICES"] for l in lines} == {""}
        assert {l["CORRAL_BACKEND"] for l in lines} == {"gloo"}
        with pytest.raises(ValueError):
            ex.place(job, contract.plan(3))
    finally:
        ex.shutdown(5)


def test_gpu_slots_from_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert detect_gpus() == [2, 5]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect_gpus() == []


def test_slot_pool_prefers_the_slots_a_job_held() -> None:
    pool = SlotPool([0, 1, 2, 3], gpu=True)
    assert pool.acquire("a", 2, prefer=[3, 1]) == [1, 3]
    assert pool.acquire("b", 3) is None
    assert pool.acquire("b", 2) == [0, 2]
    pool.release("a")
    assert pool.free() == [1, 3]


def test_is_job_worker_checks_the_process_environment() -> None:
    import os

    assert not is_job_worker(os.getpid(), "some-job")
    assert not is_job_worker(999_999_999, "some-job")


def test_executors_by_name(tmp_path: Path) -> None:
    assert "local" in executor_names()
    with pytest.raises(InputError, match="unknown executor 'k8s'"):
        create_executor("k8s", tmp_path)
    ex = create_executor("local", tmp_path, slots=1)
    ex.shutdown(1)
