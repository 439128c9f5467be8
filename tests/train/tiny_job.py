"""A tiny corral.train job for the trainer tests: logistic regression on fixed random data.

    python tiny_job.py --epochs 3 [--stop-at-step N] [--out weights.json] [--adam]

--init-hold-file F makes initialisation last until F exists (early-initialisation tests).
--step-pause S sleeps S seconds after each step: an endless job that a test keeps training while
it waits for other workers to start leaves them the CPU instead of stepping flat out.
--stop-at-step N sends SIGTERM to this worker after step N of its first launch (as an executor
would), so the job checkpoints and exits with status 143. --out writes the final weights, steps,
epoch and progress as JSON (rank 0).
"""

import argparse
import json
import os
import signal
import time

import torch
import torch.nn.functional as F

from corral.train import ElasticTrainer

ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--stop-at-step", type=int, default=None)
ap.add_argument("--out", default=None)
ap.add_argument("--adam", action="store_true")
ap.add_argument("--batch-size", type=int, default=16)
ap.add_argument("--max-batch-size", type=int, default=None)
ap.add_argument("--hold-at-step", type=int, default=None,
                help="after this step of the first launch, wait until --hold-file exists")
ap.add_argument("--hold-file", default=None)
ap.add_argument("--step-pause", type=float, default=0.0)
ap.add_argument("--init-hold-file", default=None,
                help="before building the trainer, write <file>.waiting-r<RANK> and wait "
                "until <file> exists (an initialisation as long as a test needs)")
args = ap.parse_args()
if args.init_hold_file:
    with open(f"{args.init_hold_file}.waiting-r{os.environ.get('RANK', '0')}", "w") as f:
        f.write(str(os.getpid()))
    deadline = time.monotonic() + 120
    while not os.path.exists(args.init_hold_file) and time.monotonic() < deadline:
        time.sleep(0.01)

torch.set_num_threads(1)
g = torch.Generator().manual_seed(7)
x = torch.randn(200, 5, generator=g)
y = (x @ torch.tensor([1.0, -2.0, 0.5, 0.0, 1.5]) + 0.3 * torch.randn(200, generator=g) > 0).long()
data = torch.utils.data.TensorDataset(x, y)
torch.manual_seed(0)
model = torch.nn.Linear(5, 2)
opt = (torch.optim.Adam(model.parameters(), lr=0.01) if args.adam
       else torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
trainer = ElasticTrainer(model, opt, data, batch_size=args.batch_size,
                         max_batch_size=args.max_batch_size)
first_launch = trainer.resumed is None
for _ in trainer.epochs(args.epochs):
    for xb, yb in trainer.batches():
        trainer.backward(F.cross_entropy(trainer.model(xb), yb))
        if first_launch and args.stop_at_step is not None and trainer.steps == args.stop_at_step:
            os.kill(os.getpid(), signal.SIGTERM)
        if first_launch and trainer.steps == args.hold_at_step:
            deadline = time.monotonic() + 120
            while not os.path.exists(args.hold_file) and time.monotonic() < deadline:
                time.sleep(0.01)
        if args.step_pause:
            time.sleep(args.step_pause)
    with torch.no_grad():
        xs, ys = x.to(trainer.device), y.to(trainer.device)  # the trainer's device, GPU or not
        trainer.record_metric((model(xs).argmax(1) == ys).float().mean().item())
if trainer.is_chief and args.out:
    with open(args.out, "w") as f:
        json.dump({"weights": [p.detach().flatten().tolist() for p in model.parameters()],
                   "steps": trainer.steps, "epoch": trainer.epoch, "progress": trainer.progress,
                   "resumed": trainer.resumed, "noise_updates": trainer.noise.updates,
                   "grad": None if trainer.grad_stats is None else
                   [trainer.grad_stats.sqr, trainer.grad_stats.var],
                   "profiled": trainer.profiler.profiled_steps,
                   "configs": trainer.estimator.num_configs}, f)
