"""corral.train.host_copy on the CPU: a copy, not the tensors themselves (the GPU paths are in
tests/gpu/test_gpu_host_copy.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from corral.train.host_copy import HostCopy, to_cpu  # noqa: E402


def test_a_cpu_state_is_copied_at_once_and_later_changes_do_not_reach_the_copy() -> None:
    weight = torch.arange(4.0)
    state = {"model": {"w": weight}, "opt": [weight, 3], "step": (7, "x")}
    copy = HostCopy(state)
    weight.add_(10)
    assert copy.done() and not copy.cloned
    got = copy.result()
    assert got["model"]["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert got["opt"][0].tolist() == [0.0, 1.0, 2.0, 3.0] and got["opt"][1] == 3
    assert got["step"] == (7, "x")


def test_to_cpu_copies_every_tensor_and_keeps_the_containers() -> None:
    t = torch.ones(2)
    out = to_cpu({"a": [t, (t, 1)]})
    t.zero_()
    assert out["a"][0].tolist() == [1.0, 1.0] and out["a"][1][0].tolist() == [1.0, 1.0]
    assert isinstance(out["a"][1], tuple) and out["a"][1][1] == 1
