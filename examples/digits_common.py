"""The digits data, model and accuracy shared by the two example scripts.

The images ship with scikit-learn (1,797 8x8 digits); nothing is downloaded. The split is fixed:
1,437 training and 360 test images.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

TARGET_ACCURACY = 0.95


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images N x 8 x 8, labels) from the file scikit-learn ships. Reading the file directly
    skips importing sklearn (about a second of every restart); load_digits is the fallback."""
    spec = importlib.util.find_spec("sklearn")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz" \
        if spec and spec.submodule_search_locations else None
    if path is not None and path.exists():
        raw = np.loadtxt(path, delimiter=",")
        return raw[:, :-1].reshape(-1, 8, 8), raw[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits
    d = load_digits()
    return d.images, d.target


def digits(test_fraction: float = 0.2) -> tuple[torch.utils.data.TensorDataset, ...]:
    images, labels = load_digits_arrays()
    x = torch.tensor(images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(labels, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
    cut = int(len(y) * (1 - test_fraction))
    train, test = perm[:cut], perm[cut:]
    return (torch.utils.data.TensorDataset(x[train], y[train]),
            torch.utils.data.TensorDataset(x[test], y[test]))


def make_model(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(2 * width * 16, 64), nn.ReLU(), nn.Linear(64, 10))


@torch.no_grad()
def accuracy(model: nn.Module, data: torch.utils.data.TensorDataset,
             device: torch.device | str | None = None) -> float:
    """Test accuracy, computed on `device` (default: where the model's weights are)."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.eval()
    x, y = (t.to(device) for t in data.tensors)
    acc = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return acc
