"""Process-group setup, the DistributedDataParallel wrapper, and the few collectives the
trainer needs outside DDP, over torch.distributed.

Rendezvous: the executor's `env://` variables (corral.protocol.env); backend and device from
corral.train.device. A one-worker job has no process group. A short timeout (120 s) lets the
executor restart a job whose peer died instead of hanging 30 minutes. DDP uses
`gradient_as_bucket_view`, no buffer broadcasts, and the grad_stats hook. An in-place regroup
stays short: non-zero ranks poll for the store before connecting (TCPStore's client backs off
up to ~1 s), and state goes as one byte buffer plus a pickled skeleton (`broadcast_state`).
"""

from __future__ import annotations

import datetime
import inspect
import ipaddress
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from corral.protocol.env import WorkerEnv
from corral.train.device import Placement
from corral.train.nested import map_leaves

__all__ = ["Group", "TensorLayout", "pack_tensors", "unpack_tensors"]

_TIMEOUT_S = float(os.environ.get("CORRAL_DIST_TIMEOUT_S", "120"))
# DDP's switch for syncing buffers before each forward: renamed in recent torch releases
_NO_BUFFER_SYNC = ("forward_sync_buffers" if "forward_sync_buffers" in
                   inspect.signature(DistributedDataParallel.__init__).parameters
                   else "broadcast_buffers")
# DDP's switch for broadcasting rank 0's parameters at construction (torch >= 2.4)
_HAS_INIT_SYNC = "init_sync" in inspect.signature(DistributedDataParallel.__init__).parameters
_POLL_S = 0.005  # how often a worker looks for the rendezvous store's listener
_ALIGN = 16  # bytes: every tensor's slice of a packed buffer starts at a multiple of this


def _wait_for_listener(host: str, port: int, timeout_s: float) -> None:
    """Return once something listens on `host:port`, or after `timeout_s` (the store's own
    connect then fails as it would have). A probe that connects is closed at once; the store
    accepts it and sees it go."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=max(0.1, min(
                1.0, deadline - time.monotonic()))).close()
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(_POLL_S)


def _loopback_store(worker: WorkerEnv, timeout: datetime.timedelta) -> dist.TCPStore | None:
    """The rendezvous store of a job on this machine, listening on 127.0.0.1 only (torch's own
    `tcp://` rendezvous listens on every interface whatever address it is given); None when the
    workers meet on another address (several machines: Ray)."""
    try:
        if not ipaddress.ip_address(worker.master_addr).is_loopback:
            return None
    except ValueError:
        if worker.master_addr != "localhost":
            return None
    host = "127.0.0.1"
    if worker.rank != 0:
        _wait_for_listener(host, worker.master_port, timeout.total_seconds())
        return dist.TCPStore(host, worker.master_port, worker.world_size, False, timeout)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, worker.master_port))
        sock.listen(max(128, worker.world_size))
    except OSError:
        sock.close()
        raise
    # the store owns the listening socket from here (and closes it)
    return dist.TCPStore(host, worker.master_port, worker.world_size, True, timeout,
                         wait_for_workers=False,  # init_process_group's barrier waits for them
                         master_listen_fd=sock.detach())


class Group:
    """This worker's process group (a no-op one for a single worker)."""

    def __init__(self, worker: WorkerEnv, placement: Placement,
                 timeout_s: float = _TIMEOUT_S) -> None:
        self.worker = worker
        self.rank = worker.rank
        self.size = worker.world_size
        self.device = placement.device
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.active = self.size > 1
        self._before_close: list[Callable[[], None]] = []
        if self.active and not dist.is_initialized():
            timeout = datetime.timedelta(seconds=timeout_s)
            store = _loopback_store(worker, timeout)
            if store is None and worker.rank != 0:
                _wait_for_listener(worker.master_addr, worker.master_port, timeout_s)
            rendezvous = ({"store": store} if store is not None else
                          {"init_method": f"tcp://{worker.master_addr}:{worker.master_port}"})
            dist.init_process_group(backend=placement.backend, rank=worker.rank,
                                    world_size=worker.world_size, timeout=timeout, **rendezvous)

    def data_parallel(self, module: torch.nn.Module,
                      hook: Callable[[Any, dist.GradBucket], torch.futures.Future],
                      synced: bool = False) -> torch.nn.Module:
        """`module` wrapped in DDP with `hook` (several workers), else `module` itself.
        `synced`: every rank already holds rank 0's parameters (a regroup broadcast them with
        the state), so DDP need not broadcast them again; every rank must pass the same."""
        if not self.active:
            return module
        options: dict[str, Any] = {_NO_BUFFER_SYNC: False}  # (names vary with torch's version)
        if synced and _HAS_INIT_SYNC:
            options["init_sync"] = False
        ddp = DistributedDataParallel(
            module, device_ids=[self.device.index] if self.device.type == "cuda" else None,
            gradient_as_bucket_view=True, **options)
        # DDP checks a hook's annotations against the real classes; string annotations (this
        # package's `from __future__ import annotations`) fail that check, a lambda has none
        ddp.register_comm_hook(None, lambda state, bucket: hook(state, bucket))
        return ddp

    def broadcast_module(self, module: torch.nn.Module, src: int = 0) -> None:
        """Every parameter and buffer of `module` as rank `src` has them."""
        if self.active:
            with torch.no_grad():
                for t in list(module.parameters()) + list(module.buffers()):
                    dist.broadcast(t.data, src)

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank `src`'s picklable `obj` on every rank (the training state in a resize)."""
        if not self.active:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src,
                                   device=self.device if self.device.type == "cuda" else None)
        return box[0]

    def broadcast_state(self, obj: Any, src: int = 0) -> Any:
        """Rank `src`'s `obj` (nested dicts, lists and tuples holding tensors: the training
        state) on every rank: the tensors as one packed byte buffer on this worker's device,
        the rest pickled. The copies are the receivers' own (none shares a buffer)."""
        if not self.active:
            return obj
        if self.rank == src:
            skeleton, tensors = _strip(obj)
            flat, layout = pack_tensors(tensors, self.device)
            self.broadcast_object((skeleton, layout, flat.numel()), src)
        else:
            skeleton, layout, size = self.broadcast_object(None, src)
            flat = torch.empty(size, dtype=torch.uint8, device=self.device)
        dist.broadcast(flat, src)
        if self.rank == src:
            return obj
        return _fill(skeleton, unpack_tensors(flat, layout))

    def broadcast_ints(self, values: list[int], src: int = 0) -> list[int]:
        """`values` of rank `src`, on every rank (a synchronisation: batch decisions only)."""
        if not self.active:
            return list(values)
        t = torch.tensor(values, dtype=torch.int64, device=self.device)
        dist.broadcast(t, src)
        return [int(v) for v in t.tolist()]

    def on_close(self, fn: Callable[[], None]) -> None:
        """Call `fn` first when this group closes, while it still works: a DDP wrapper let go
        of after the group is destroyed can hang its process in the reducer's teardown."""
        self._before_close.append(fn)

    def close(self) -> None:
        """Leave together: a worker that tears down its gloo connections while a peer still
        uses them can abort the peer (SIGABRT) or leave it hanging in its own teardown."""
        if self.active and dist.is_initialized():
            for fn in self._before_close:
                fn()
            try:
                dist.barrier(device_ids=[self.device.index] if self.device.type == "cuda"
                             else None)
            except RuntimeError:
                pass  # a peer is gone already: nothing to wait for
            dist.destroy_process_group()
        self.active = False


@dataclass(frozen=True)
class _Slot:
    """Where a tensor was in a state stripped by `_strip`: its index in the packed list."""

    index: int


@dataclass(frozen=True)
class TensorLayout:
    """One tensor's place in a packed buffer: byte offset, dtype, shape, and whether it goes
    back to the CPU (the random state must) or stays on the receiver's device."""

    offset: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    cpu: bool


def _strip(obj: Any) -> tuple[Any, list[torch.Tensor]]:
    """`obj` with each dense tensor replaced by a `_Slot`, and those tensors in order."""
    tensors: list[torch.Tensor] = []

    def slot(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.layout == torch.strided:
            tensors.append(x.detach())
            return _Slot(len(tensors) - 1)
        return x

    return map_leaves(obj, slot), tensors


def _fill(obj: Any, tensors: list[torch.Tensor]) -> Any:
    """`_strip` undone: each `_Slot` replaced by its tensor."""
    return map_leaves(obj, lambda x: tensors[x.index] if isinstance(x, _Slot) else x)


def pack_tensors(tensors: list[torch.Tensor], device: torch.device
                 ) -> tuple[torch.Tensor, list[TensorLayout]]:
    """`tensors`' bytes in one uint8 buffer on `device`, each at an aligned offset."""
    layout, offset = [], 0
    for t in tensors:
        layout.append(TensorLayout(offset, t.dtype, tuple(t.shape), t.device.type == "cpu"))
        offset += -(-t.numel() * t.element_size() // _ALIGN) * _ALIGN
    flat = torch.empty(offset, dtype=torch.uint8, device=device)
    for t, where in zip(tensors, layout):
        n = t.numel() * t.element_size()
        if n:
            flat[where.offset:where.offset + n].view(t.dtype).copy_(t.reshape(-1))
    return flat, layout


def unpack_tensors(flat: torch.Tensor, layout: list[TensorLayout]) -> list[torch.Tensor]:
    """The tensors `pack_tensors` packed into `flat`, each a copy of its own."""
    out = []
    for where in layout:
        n = torch.Size(where.shape).numel() * where.dtype.itemsize
        piece = flat[where.offset:where.offset + n].view(where.dtype).view(where.shape)
        out.append(piece.to("cpu", copy=True) if where.cpu else piece.clone())
    return out
