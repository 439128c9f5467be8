"""GPU types on the local executor: slots of named types (CPU, `--slots t4:1,a100:2`) or the
GPUs' own (nvidia-smi's names), one node per type, and each worker told its slot's type."""

from __future__ import annotations

from pathlib import Path

import contract  # noqa: E402  (this folder is on sys.path: conftest.py)
import pytest

from corral.core.cluster import Placement
from corral.core.errors import InputError
from corral.executors.base import ExecState, WorkerPlan
from corral.executors.local import LocalExecutor
from corral.executors.slots import SlotPool, gpu_types_from_smi, parse_slots


def test_parse_slots_old_and_typed_forms() -> None:
    assert parse_slots("3") == ["", "", ""]
    assert parse_slots("t4:1, a100:2") == ["t4", "a100", "a100"]
    assert parse_slots("T4:1,A100-SXM4:1") == ["t4", "a100-sxm4"]  # matched by lower case
    for bad in ("0", "t4", "t4:0", "T4!:1", "t4:1,t4:2", "t4:1,T4:2", "t4:1,", ":2"):
        with pytest.raises(InputError):
            parse_slots(bad)


def test_gpu_types_from_nvidia_smi_names() -> None:
    out = "0, NVIDIA A100-SXM4-40GB\n1, Tesla T4\n2, NVIDIA A100-SXM4-40GB\n"
    assert gpu_types_from_smi(out, [2, 1]) == ["a100", "t4"]
    assert gpu_types_from_smi(out, [0, 7]) == ["", ""]  # a GPU it does not list: no guess


def test_slot_pool_takes_a_placements_slots_on_each_node() -> None:
    pool = SlotPool([0, 1, 2, 3], gpu=False, nodes=[0, 1, 1, 1])
    assert pool.acquire_on("a", {1: 2}) == [1, 2]
    assert pool.acquire_on("b", {0: 1, 1: 2}) is None  # all or nothing
    assert pool.free() == [0, 3]
    assert pool.acquire_on("b", {0: 1, 1: 1}) == [0, 3]


def test_typed_cpu_slots_are_one_node_per_type(tmp_path: Path) -> None:
    ex = LocalExecutor(tmp_path, slot_types=["t4", "a100", "a100"], poll_s=0.02)
    try:
        c = ex.cluster()
        assert [(n.name, n.gpus, n.gpu_type) for n in c.nodes] == [
            ("localhost-t4", 1, "t4"), ("localhost-a100", 2, "a100")]
        with pytest.raises(ValueError):
            ex.place(contract.launch("big", "finish"), WorkerPlan(Placement(((0, 2),))))
        ex.place(contract.launch("a", "finish"), WorkerPlan(Placement(((1, 2),))))
        ex.place(contract.launch("b", "finish"), WorkerPlan(Placement(((0, 1),))))
        for job in ("a", "b"):
            assert ex.wait_for(job, contract.END, contract.TIMEOUT_S).state is ExecState.DONE
        assert {l["CORRAL_GPU_TYPE"] for l in contract.env_lines(ex, "a")} == {"a100"}
        assert {l["CORRAL_GPU_TYPE"] for l in contract.env_lines(ex, "b")} == {"t4"}
    finally:
        ex.shutdown(5)


def test_untyped_slots_keep_one_node_and_tell_workers_the_unnamed_type(tmp_path: Path) -> None:
    ex = LocalExecutor(tmp_path, slots=2, poll_s=0.02)
    try:
        assert [(n.name, n.gpus, n.gpu_type) for n in ex.cluster().nodes] == [("localhost", 2, "")]
        ex.place(contract.launch("u", "finish"), contract.plan(2))
        ex.wait_for("u", contract.END, contract.TIMEOUT_S)
        assert {l["CORRAL_GPU_TYPE"] for l in contract.env_lines(ex, "u")} == {""}
    finally:
        ex.shutdown(5)


def test_a_job_moved_to_another_type_restarts_there(tmp_path: Path) -> None:
    ex = LocalExecutor(tmp_path, slot_types=["t4", "a100"], poll_s=0.02, stop_timeout_s=10)
    try:
        job = contract.launch("m", "sleep")
        ex.place(job, WorkerPlan(Placement(((0, 1),))))
        contract.wait_until(lambda: contract.env_lines(ex, "m"), what="the first launch")
        ex.place(job, WorkerPlan(Placement(((1, 1),))))
        contract.wait_until(lambda: len(contract.env_lines(ex, "m")) == 2, what="the second launch")
        assert [l["CORRAL_GPU_TYPE"] for l in contract.env_lines(ex, "m")] == ["t4", "a100"]
        assert ex.pool.held("m") == [1]
        ex.stop("m", cancel=True)
        ex.wait_for("m", contract.END, contract.TIMEOUT_S)
    finally:
        ex.shutdown(5)
