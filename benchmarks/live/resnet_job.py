"""A corral.train job training ResNet-18 (benchmarks/live/resnet.py, 32x32 input) on synthetic data,
for the resize benchmark: `python benchmarks/live/resnet_job.py [--epochs N] [--images 512]
[--device cpu|cuda]`. The images and labels are drawn from a fixed seed (nothing is downloaded);
the loss falls as the network fits them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from resnet import resnet  # noqa: E402

from corral.train import ElasticTrainer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=1000)
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--device", default=None)
    args = ap.parse_args()

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    images = torch.randn(args.images, 3, 32, 32, generator=g)
    labels = torch.randint(0, 10, (args.images,), generator=g)
    torch.manual_seed(0)
    model = resnet(18, num_classes=10, small_input=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    trainer = ElasticTrainer(model, optimizer, torch.utils.data.TensorDataset(images, labels),
                             batch_size=args.batch_size, device=args.device)
    for _ in trainer.epochs(args.epochs):
        for x, y in trainer.batches():
            with trainer.autocast():
                loss = F.cross_entropy(trainer.model(x), y)
            trainer.backward(loss)


if __name__ == "__main__":
    main()
