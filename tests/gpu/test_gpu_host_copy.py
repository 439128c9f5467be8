"""corral.train.host_copy on a GPU: the copy holds the values as of the moment it was asked
for, though the training stream goes on changing the tensors in place, on both paths (clones
copied on a side stream, and copies queued on the training stream when the GPU lacks room)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import corral.train.host_copy as host_copy  # noqa: E402


@pytest.mark.parametrize("room", [True, False])
def test_the_copy_holds_the_values_when_it_was_taken(room: bool, monkeypatch) -> None:
    monkeypatch.setattr(host_copy, "_room_for", lambda nbytes, device: room)
    dev = torch.device("cuda", 0)
    big = torch.zeros(4096, 4096, device=dev)  # 64 MiB: the transfer takes a while
    small = torch.arange(10, device=dev)
    half = torch.full((7,), 2.0, dtype=torch.bfloat16, device=dev)
    state = {"model": {"w": big, "tied": big, "cols": big[:, :3], "half": half},
             "opt": [small], "rng": torch.ones(3), "n": 5}
    for _ in range(3):
        copy = host_copy.HostCopy(state)
        assert copy.cloned is room
        big.add_(1)  # queued after the copy on the training stream
        small.mul_(2)
        got = copy.result()
        expect = float(big[0, 0].item()) - 1
        assert got["model"]["w"].device.type == "cpu" and got["model"]["w"].is_pinned()
        assert float(got["model"]["w"][-1, -1]) == expect
        assert torch.equal(got["model"]["tied"], got["model"]["w"])
        assert got["model"]["cols"].shape == (4096, 3)
        assert float(got["model"]["cols"][-1, -1]) == expect
        assert got["model"]["half"].dtype == torch.bfloat16
        assert got["model"]["half"].tolist() == [2.0] * 7
        assert got["opt"][0].tolist() == (small // 2).tolist()
        assert got["rng"].tolist() == [1.0, 1.0, 1.0] and got["n"] == 5


def test_the_room_check_counts_free_and_cached_memory() -> None:
    dev = torch.device("cuda", 0)
    free, total = torch.cuda.mem_get_info(dev)
    assert host_copy._room_for(1 << 20, dev)
    assert not host_copy._room_for(total * 2, dev)


def test_a_gather_that_runs_out_of_memory_falls_back_to_queued_copies(monkeypatch) -> None:
    monkeypatch.setattr(host_copy, "_room_for", lambda nbytes, device: True)

    def no_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated: fragmented)")
    monkeypatch.setattr(torch, "cat", no_memory)
    dev = torch.device("cuda", 0)
    weight = torch.full((1000,), 3.0, device=dev)
    copy = host_copy.HostCopy({"w": weight})
    weight.zero_()
    assert not copy.cloned and copy.result()["w"].tolist() == [3.0] * 1000


def test_a_background_checkpoint_of_gpu_tensors_holds_them_as_copied(tmp_path) -> None:
    from corral.train.checkpoint import CheckpointStore
    dev = torch.device("cuda", 0)
    weight = torch.zeros(2048, 2048, device=dev)
    store = CheckpointStore(tmp_path)
    for n in range(3):
        store.save_async(host_copy.HostCopy({"w": weight, "n": n}))
        weight.add_(1)  # the next step changes it while the writer thread waits for the copy
    store.close()
    state, path = store.load()
    assert path.name == "ckpt-00000003.pt" and state["n"] == 2
    assert state["w"].device.type == "cpu" and float(state["w"][-1, -1]) == 2.0


def test_a_gpu_dataset_is_gathered_on_the_gpu() -> None:
    import numpy as np

    from corral.train.data import BatchFetcher
    dev = torch.device("cuda", 0)
    data = torch.utils.data.TensorDataset(torch.arange(32.0, device=dev).view(16, 2),
                                          torch.arange(16, device=dev))
    x, y = BatchFetcher(data, dev).gather(np.array([3, 1]))
    assert x.device == dev and y.tolist() == [3, 1] and x[0].tolist() == [6.0, 7.0]
