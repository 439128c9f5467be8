"""Process-group setup and the few collectives the trainer needs, over torch.distributed.

The rendezvous is the executor's `env://` variables (corral.train.env.WorkerEnv); gloo on CPU,
nccl on GPUs. A one-worker job creates no process group. The timeout is short (default 120 s)
so that a worker whose peer died does not hang for torch's default 30 minutes: the executor
restarts the job from its checkpoint instead.
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from corral.train.env import WorkerEnv

__all__ = ["Group"]

_TIMEOUT_S = float(os.environ.get("CORRAL_DIST_TIMEOUT_S", "120"))


class Group:
    """This worker's process group (a no-op one for a single worker)."""

    def __init__(self, worker: WorkerEnv) -> None:
        self.worker = worker
        self.rank = worker.rank
        self.size = worker.world_size
        if worker.backend == "nccl" and torch.cuda.is_available():
            self.device = torch.device("cuda", worker.local_rank % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        self.active = self.size > 1
        if self.active and not dist.is_initialized():
            dist.init_process_group(
                backend=worker.backend if self.device.type == "cuda" else "gloo",
                init_method=f"tcp://{worker.master_addr}:{worker.master_port}",
                rank=worker.rank, world_size=worker.world_size,
                timeout=datetime.timedelta(seconds=_TIMEOUT_S))

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        if self.active:
            dist.all_reduce(tensor)

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        if self.active:
            dist.broadcast(tensor, src)

    def broadcast_ints(self, values: list[int], src: int = 0) -> list[int]:
        """`values` of rank `src`, on every rank."""
        if not self.active:
            return list(values)
        t = torch.tensor(values, dtype=torch.int64, device=self.device)
        dist.broadcast(t, src)
        return [int(v) for v in t.tolist()]

    def close(self) -> None:
        """Leave together: a worker that tears down its gloo connections while a peer still
        uses them can abort the peer (SIGABRT) or leave it hanging in its own teardown."""
        if self.active and dist.is_initialized():
            try:
                dist.barrier()
            except RuntimeError:
                pass  # a peer is gone already: nothing to wait for
            dist.destroy_process_group()
        self.active = False
