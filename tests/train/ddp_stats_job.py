"""A corral.train job for the DDP tests: logistic regression on fixed random data, fixed batch.

    python ddp_stats_job.py --out result.json [--steps N] [--adam] [--precision bf16]

Rank 0 writes the weights and the trainer's noise state after N steps (the gradient-noise
statistics of several workers come from the DDP communication hook).
"""

import argparse
import json
import os
import signal

import torch
import torch.nn.functional as F

from corral.train import ElasticTrainer

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--steps", type=int, default=6)
ap.add_argument("--adam", action="store_true")
ap.add_argument("--clip", type=float, default=None)
ap.add_argument("--sigterm-rank", type=int, default=None, help="SIGTERM this rank only ...")
ap.add_argument("--sigterm-at", type=int, default=3, help="... after this step")
args = ap.parse_args()

torch.set_num_threads(1)


def data() -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(256, 5, generator=g)
    y = (x @ torch.tensor([1.0, -2.0, 0.5, 0.0, 1.5]) + 0.3 * torch.randn(256, generator=g) > 0)
    return torch.utils.data.TensorDataset(x, y.long())


def model_and_optimizer(adam: bool):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = (torch.optim.Adam(model.parameters(), lr=0.01) if adam
           else torch.optim.SGD(model.parameters(), lr=0.1))
    return model, opt


if __name__ == "__main__":
    model, opt = model_and_optimizer(args.adam)
    trainer = ElasticTrainer(model, opt, data(), batch_size=16, clip_grad_norm=args.clip,
                             checkpoint_dir=os.environ.get("CORRAL_CHECKPOINT_DIR"))
    done = False
    for _ in trainer.epochs(100):
        for xb, yb in trainer.batches():
            trainer.backward(F.cross_entropy(trainer.model(xb), yb))
            if trainer.rank == args.sigterm_rank and trainer.steps == args.sigterm_at \
                    and trainer.resumed is None:
                os.kill(os.getpid(), signal.SIGTERM)  # as a late signal from the executor
            if trainer.steps == args.steps:
                done = True
                break
        if done:
            break
    if trainer.is_chief:
        with open(args.out, "w") as f:
            json.dump({"weights": [p.detach().flatten().tolist() for p in model.parameters()],
                       "noise": trainer.noise.state_dict(), "steps": trainer.steps}, f)
    trainer.group.close()
