"""Process-group setup, the DistributedDataParallel wrapper, and the few collectives the
trainer needs outside DDP, over torch.distributed.

The rendezvous is the executor's `env://` variables (corral.protocol.env.WorkerEnv), on a store
that listens on 127.0.0.1 only when the workers meet on this machine; the backend
and device come from corral.train.device (nccl on GPUs, gloo on the CPU). A one-worker job
creates no process group and trains the module as it is. The timeout is short (default 120 s)
so that a worker whose peer died does not hang for torch's default 30 minutes: the executor
restarts the job from its checkpoint instead.

DDP is built with `gradient_as_bucket_view` (no gradient copies) and without buffer broadcasts
(batch-norm statistics stay per worker, rank 0's are checkpointed, as before DDP), and with the
trainer's communication hook, which carries the gradient-noise statistics and the stop and
divergence flags in the gradient buckets (corral.train.grad_stats).
"""

from __future__ import annotations

import datetime
import inspect
import ipaddress
import os
import socket
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from corral.protocol.env import WorkerEnv
from corral.train.device import Placement

__all__ = ["Group"]

_TIMEOUT_S = float(os.environ.get("CORRAL_DIST_TIMEOUT_S", "120"))
# DDP's switch for syncing buffers before each forward: renamed in recent torch releases
_NO_BUFFER_SYNC = ("forward_sync_buffers" if "forward_sync_buffers" in
                   inspect.signature(DistributedDataParallel.__init__).parameters
                   else "broadcast_buffers")


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
            rendezvous = ({"store": store} if store is not None else
                          {"init_method": f"tcp://{worker.master_addr}:{worker.master_port}"})
            dist.init_process_group(backend=placement.backend, rank=worker.rank,
                                    world_size=worker.world_size, timeout=timeout, **rendezvous)

    def data_parallel(self, module: torch.nn.Module,
                      hook: Callable[[Any, dist.GradBucket], torch.futures.Future]
                      ) -> torch.nn.Module:
        """`module` wrapped in DDP with `hook` (several workers), else `module` itself."""
        if not self.active:
            return module
        ddp = DistributedDataParallel(
            module, device_ids=[self.device.index] if self.device.type == "cuda" else None,
            gradient_as_bucket_view=True, **{_NO_BUFFER_SYNC: False})
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
