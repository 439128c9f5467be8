"""What a routine checkpoint costs the training thread: a synchronous save against a background
one (corral.train.checkpoint.CheckpointStore.save_async), on a ResNet state.

The trainer checkpoints at every epoch end. A synchronous save holds training for the copy to
host memory, the serialisation, the write and two fsyncs; a background one only for the copy
(corral.train.host_copy.HostCopy). Printed per model: the training thread's time per save
(median of `--saves`), how long the background write then took, and what either costs an epoch
of `--epoch-s` seconds (default 2.7 s: ResNet-18 on CIFAR-10, 196 steps of 14 ms on an H100).
The state is on `--device` (cpu, or cuda where there is one); the directory is a temporary one
on the disk that holds the system's temporary files (`--dir` to choose).

Run: python benchmarks/live/bench_checkpoint.py [--models resnet18 resnet50] [--saves 5]
         [--device cpu|cuda] [--epoch-s 2.7] [--dir PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import machine

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _state(depth: int, device: str) -> dict:
    """A ResNet's model and SGD-momentum optimizer state, as a checkpoint holds them."""
    import torch
    from resnet import resnet
    model = resnet(depth, small_input=depth <= 18).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()  # the momentum buffers exist
    return {"model": model.state_dict(), "optimizer": opt.state_dict()}


def _measure(state: dict, directory: Path, saves: int, background: bool
             ) -> tuple[list[float], list[float]]:
    """(training thread's ms per save, ms until the write was on disk) over `saves` saves."""
    from corral.train.checkpoint import CheckpointStore
    from corral.train.host_copy import HostCopy

    store = CheckpointStore(directory)
    held, done = [], []
    for _ in range(saves):
        start = time.perf_counter()
        copy = HostCopy(state)
        if background:
            store.save_async(copy)
        else:
            store.save(copy.result())
        held.append(1000 * (time.perf_counter() - start))
        store.flush()
        done.append(1000 * (time.perf_counter() - start))
    store.close()
    return held, done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "resnet50"],
                    choices=["resnet18", "resnet50"])
    ap.add_argument("--saves", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--epoch-s", type=float, default=2.7)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    import torch

    from corral.train.nested import map_leaves
    print(f"machine: {machine()}; state on {args.device}; an epoch of {args.epoch_s} s")
    for name in args.models:
        state = _state(int(name.removeprefix("resnet")), args.device)
        sizes: list[int] = []
        map_leaves(state, lambda x: sizes.append(x.numel() * x.element_size())
                   if isinstance(x, torch.Tensor) else None)
        mib = sum(sizes) / 2**20
        for background in (False, True):
            with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
                held, done = _measure(state, Path(tmp), args.saves, background)
            how = "background" if background else "synchronous"
            hold = statistics.median(held)
            print(f"{name} ({mib:.0f} MiB) {how:11s}: training held {hold:7.1f} ms per save "
                  f"(written after {statistics.median(done):6.1f} ms), "
                  f"{100 * hold / (1000 * args.epoch_s):5.2f} % of an epoch")


if __name__ == "__main__":
    main()
