"""Which device a worker trains on, and which torch.distributed backend it uses.

Under an executor (`CORRAL_BACKEND`): `nccl` uses the GPU LOCAL_RANK names among those in
CUDA_VISIBLE_DEVICES, `gloo` the CPU. Standalone: cuda:LOCAL_RANK if CUDA is present (wrapping
round the GPUs seen), else the CPU; more workers on a node than GPUs with all GPUs visible is a
clear error (nccl would fail deep inside with "duplicate GPU"). `requested` (the trainer's
`device=`) overrides both. Every tensor the trainer makes goes on `Placement.device`. The GPU
type a worker reports: `gpu_type_of`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from corral.protocol.env import ENV_GPU_TYPE, WorkerEnv
from corral.protocol.report import gpu_type_name

__all__ = ["Placement", "place_worker", "gpu_type_of"]


@dataclass(frozen=True)
class Placement:
    """A worker's device and the process-group backend that goes with it."""

    device: torch.device
    backend: str  # "nccl" or "gloo"


def _gpu(index: int) -> Placement:
    count = torch.cuda.device_count()
    if count < 1:
        raise RuntimeError("a GPU was asked for but torch sees none (torch.cuda.device_count() "
                           "is 0: check CUDA_VISIBLE_DEVICES and that torch is a CUDA build)")
    return Placement(torch.device("cuda", index % count), "nccl")


def place_worker(worker: WorkerEnv, requested: str | torch.device | None = None) -> Placement:
    """The device and backend for `worker`; see the module docstring for the rules."""
    if requested is not None:
        dev = torch.device(requested)
        if dev.type == "cpu":
            return Placement(dev, "gloo")
        if dev.type == "cuda":
            return _gpu(worker.local_rank if dev.index is None else dev.index)
        raise ValueError(f"unsupported training device {str(dev)!r}: use 'cpu' or 'cuda[:N]'")
    if worker.backend == "nccl":
        return _gpu(worker.local_rank)
    if worker.backend == "gloo":
        return Placement(torch.device("cpu"), "gloo")
    if torch.cuda.is_available():  # standalone on a GPU machine
        _check_one_gpu_each(worker)
        return _gpu(worker.local_rank)
    return Placement(torch.device("cpu"), "gloo")


def _check_one_gpu_each(worker: WorkerEnv) -> None:
    """Refuse standalone workers that would share this node's GPUs (module docstring)."""
    count = torch.cuda.device_count()
    if (worker.world_size > 1 and worker.local_world_size > count
            and os.environ.get("CUDA_VISIBLE_DEVICES") is None):
        raise RuntimeError(
            f"{worker.local_world_size} workers on this node but torch sees {count} GPU(s): "
            f"nccl needs a GPU of its own per worker; start at most {count} worker(s) per "
            "node, or train on the CPU (ElasticTrainer(device='cpu'), or CORRAL_BACKEND=gloo)")


def gpu_type_of(device: torch.device, environ: Mapping[str, str] | None = None) -> str:
    """The GPU type a worker on `device` reports: the executor's `CORRAL_GPU_TYPE` whenever it is
    set, even to "" (the cluster's name for the slot's type: the scheduler's models must be keyed
    as its cluster names types), else (standalone) the CUDA device's name made short
    (corral.protocol.report.gpu_type_name), else "" (the CPU)."""
    given = (os.environ if environ is None else environ).get(ENV_GPU_TYPE)
    if given is not None:
        return given
    if device.type == "cuda":
        return gpu_type_name(torch.cuda.get_device_name(device))
    return ""
