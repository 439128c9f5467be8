"""The parts that keep an in-place regroup short (corral.train.distributed, the trainer's
wrapper drop): the training state packed into one buffer and back, a rendezvous client that
waits for the store's listener instead of backing off, and the DDP wrapper let go of without a
full garbage collection when nothing else holds it."""

from __future__ import annotations

import datetime
import gc
import socket
import threading
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from corral.executors.procs import free_port  # noqa: E402
from corral.protocol.env import WorkerEnv  # noqa: E402
from corral.train import distributed  # noqa: E402
from corral.train import trainer as trainer_module  # noqa: E402
from corral.train.distributed import (  # noqa: E402
    _fill,
    _loopback_store,
    _strip,
    _wait_for_listener,
    pack_tensors,
    unpack_tensors,
)


def _tensors() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.randn(3, 5, generator=g), torch.randn(7, dtype=torch.float64, generator=g),
            torch.tensor(4.0), torch.arange(5, dtype=torch.int64), torch.zeros(0, 4),
            torch.tensor([True, False, True]), torch.randn(3, dtype=torch.float16, generator=g),
            torch.randn(4, 6, generator=g).t(),  # not contiguous
            torch.get_rng_state()]


def test_packed_tensors_come_back_equal_and_each_with_its_own_storage() -> None:
    tensors = _tensors()
    flat, layout = pack_tensors(tensors, torch.device("cpu"))
    assert flat.dtype == torch.uint8 and all(w.offset % 16 == 0 for w in layout)
    back = unpack_tensors(flat, layout)
    for a, b in zip(tensors, back):
        assert b.dtype == a.dtype and b.shape == a.shape and torch.equal(a, b)
        # a copy of its own: a checkpoint of one tensor must not save the whole buffer
        assert b.untyped_storage().data_ptr() != flat.untyped_storage().data_ptr()
        assert b.untyped_storage().nbytes() == b.numel() * b.element_size()
    flat.zero_()
    assert torch.equal(back[0], tensors[0])


def test_a_stripped_state_is_filled_back_as_it_was() -> None:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "steps": 7,
             "pair": (torch.ones(2), "x"), "rng": torch.get_rng_state()}
    skeleton, tensors = _strip(state)
    assert len(tensors) == 2 + 2 + 1 + 1  # weight, bias, two momentum buffers, pair, rng
    assert not any(isinstance(v, torch.Tensor) for v in _leaves(skeleton))
    flat, layout = pack_tensors(tensors, torch.device("cpu"))
    back = _fill(skeleton, unpack_tensors(flat, layout))
    assert back["steps"] == 7 and back["pair"][1] == "x" and isinstance(back["pair"], tuple)
    assert torch.equal(back["model"]["weight"], model.weight)
    momentum = back["optimizer"]["state"][0]["momentum_buffer"]
    assert torch.equal(momentum, opt.state_dict()["state"][0]["momentum_buffer"])
    restored = torch.optim.SGD(torch.nn.Linear(3, 2).parameters(), lr=0.1, momentum=0.9)
    restored.load_state_dict(back["optimizer"])  # the optimizer takes it as it took the old


def _leaves(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _leaves(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _leaves(v)
    else:
        yield obj


def test_waiting_for_a_listener_returns_once_it_listens_or_at_the_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait probes between polls and returns at the first probe after the listener is up
    (counted in polls, not timed: a loaded machine can delay any thread by tenths of a second)."""
    port = free_port()
    t0 = time.monotonic()
    _wait_for_listener("127.0.0.1", port, 0.2)  # nothing listens: gives up at the timeout
    assert 0.2 <= time.monotonic() - t0 < 10.0  # gives up (the bound: a hang guard, not a speed)

    polls: list[float] = []
    opened: list[socket.socket] = []

    def poll(seconds: float) -> None:  # the wait's sleep between probes: the 3rd one opens it
        polls.append(seconds)
        if len(polls) == 3:
            opened.append(socket.create_server(("127.0.0.1", port)))

    monkeypatch.setattr(distributed, "time", SimpleNamespace(monotonic=time.monotonic, sleep=poll))
    try:
        _wait_for_listener("127.0.0.1", port, 60)
    finally:
        for sock in opened:
            sock.close()
    assert len(polls) == 3 and opened  # returned at the probe right after the third poll
    assert all(p == distributed._POLL_S for p in polls)


def test_a_worker_that_comes_before_the_store_joins_as_soon_as_it_listens(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 asks for the store before rank 0 opens it (joiners of an in-place grow wait long
    before the old rank 0 gets there): it waits for the listener first and connects only once
    the store listens, so TCPStore's own back-off (0.25 to 1.2 s per refused connect) never
    starts. Checked by order, not by time: the client's wait returns after the store opened."""
    timeout = datetime.timedelta(seconds=20)
    port = free_port()
    joined: list = []
    events: list[str] = []
    real_wait = distributed._wait_for_listener

    def wait(host: str, at: int, timeout_s: float) -> None:
        events.append("client waits")
        real_wait(host, at, timeout_s)
        events.append("client connects")

    monkeypatch.setattr(distributed, "_wait_for_listener", wait)

    def client() -> None:
        store = _loopback_store(WorkerEnv(rank=1, world_size=2, master_port=port), timeout)
        joined.append(store)

    thread = threading.Thread(target=client)
    thread.start()
    deadline = time.monotonic() + 30
    while events != ["client waits"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert events == ["client waits"]  # the client is waiting, and has not connected
    events.append("store listens")
    server = _loopback_store(WorkerEnv(rank=0, world_size=2, master_port=port), timeout)
    thread.join(30)
    (store,) = joined
    store.set("k", "v")
    assert server.get("k") == b"v"
    assert events == ["client waits", "store listens", "client connects"]


class _Holder:
    def __init__(self) -> None:
        self.module = torch.nn.Linear(2, 2)
        self.model = torch.nn.Sequential(self.module)  # stands in for the DDP wrapper


def test_the_wrapper_goes_without_a_full_collection_unless_something_holds_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    collections = []
    monkeypatch.setattr(trainer_module.gc, "collect", lambda *a: collections.append(a) or 0)
    freed = _Holder()
    trainer_module._drop_data_parallel(freed)
    assert freed.model is freed.module and collections == []
    trainer_module._drop_data_parallel(freed)  # nothing left to drop
    assert collections == []

    cyclic = _Holder()
    cyclic.model.loop = cyclic.model  # only a collection frees it
    trainer_module._drop_data_parallel(cyclic)
    assert cyclic.model is cyclic.module and len(collections) == 1


def test_a_cycle_held_wrapper_is_really_collected() -> None:
    import weakref

    holder = _Holder()
    holder.model.loop = holder.model
    gone = weakref.ref(holder.model)
    gc.disable()
    try:
        trainer_module._drop_data_parallel(holder)
        assert gone() is None
    finally:
        gc.enable()
