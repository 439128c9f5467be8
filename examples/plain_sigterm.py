"""A plain PyTorch DDP script that only checkpoints on SIGTERM and resumes: the non-intrusive
path (SideCar's stop-and-restart). It does not import corral.

    corral submit --gpus 2 --batch-size 32 -- python examples/plain_sigterm.py

What makes it schedulable by corral, and by nothing corral-specific:
* it joins `torch.distributed` with the standard env:// variables (RANK, WORLD_SIZE, ...);
* on SIGTERM it finishes the current step, the workers agree to stop, rank 0 saves model,
  optimizer and position to $CORRAL_CHECKPOINT_DIR (temporary file + rename), and every
  worker exits with status 143;
* on start it resumes from that checkpoint, whatever the new number of workers; the global
  batch stays the user's (non-adaptive), split over the workers;
* it trains on the GPU that LOCAL_RANK names when CUDA is present (nccl), else on the CPU
  (gloo).
Exit status 0 means finished. Stated result: test accuracy >= 0.95 after the default 6 epochs.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from digits_common import TARGET_ACCURACY, accuracy, digits, make_model
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

stop_requested = False


def on_sigterm(signum, frame):
    global stop_requested
    stop_requested = True


def save(path: str, state: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def leave(world: int) -> None:
    """Wait for every worker, then close the process group: a worker that exits while a
    peer still holds its gloo connections can be aborted (SIGABRT) by the peer's teardown."""
    if world > 1:
        dist.barrier(device_ids=[torch.cuda.current_device()] if torch.cuda.is_available()
                     and dist.get_backend() == "nccl" else None)
        dist.destroy_process_group()


def main() -> None:
    signal.signal(signal.SIGTERM, on_sigterm)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=32, help="global batch size")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--checkpoint-dir", default=os.environ.get("CORRAL_CHECKPOINT_DIR", "."))
    args = ap.parse_args()

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available() and os.environ.get("CORRAL_BACKEND", "nccl") == "nccl"
    device = torch.device("cuda", local_rank % torch.cuda.device_count()) if cuda \
        else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo", init_method="env://")
    torch.manual_seed(0)
    train, test = digits()
    model = make_model(16).to(device)
    if rank == 0:
        print(f"training on {device} with {world} worker(s)", flush=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    os.makedirs(args.checkpoint_dir, exist_ok=True)  # a new directory is a fresh start
    path = os.path.join(args.checkpoint_dir, "plain.pt")
    epoch, step_in_epoch = 0, 0
    if os.path.exists(path):
        state = torch.load(path, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        epoch, step_in_epoch = state["epoch"], state["step_in_epoch"]
        if rank == 0:
            print(f"resumed at epoch {epoch} step {step_in_epoch} with {world} worker(s)", flush=True)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None) \
        if world > 1 else model
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, seed=0, drop_last=True)
    loader = DataLoader(train, batch_size=max(1, args.batch_size // world), sampler=sampler,
                        drop_last=True, pin_memory=cuda)
    last_loss = float("nan")
    while epoch < args.epochs:
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            if i < step_in_epoch:
                continue  # done before the restart
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.cross_entropy(ddp(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            last_loss = loss.item()
            flag = torch.tensor([1.0 if stop_requested else 0.0], device=device)
            if world > 1:
                dist.all_reduce(flag)
            if flag.item() > 0:
                if rank == 0:
                    save(path, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                "epoch": epoch, "step_in_epoch": i + 1})
                    print(f"checkpointed at epoch {epoch} step {i + 1}; stopping", flush=True)
                leave(world)
                sys.exit(143)
        epoch, step_in_epoch = epoch + 1, 0
        if rank == 0:
            save(path, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch, "step_in_epoch": 0})
            print(f"epoch {epoch} loss {last_loss:.4f} accuracy {accuracy(model, test):.4f}",
                  flush=True)
    if rank == 0:
        print(f"final test accuracy {accuracy(model, test):.4f} (target {TARGET_ACCURACY})",
              flush=True)
    leave(world)


if __name__ == "__main__":
    main()
