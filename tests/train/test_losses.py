"""LossTally: losses summed on the device, the guard fed once per fold, means per report."""

import math

import torch

from corral.train.grad_stats import DIVERGED, EXTRA_SLOTS
from corral.train.guard import DivergenceGuard
from corral.train.losses import LossTally

CPU = torch.device("cpu")


def test_mean_is_over_every_loss_since_the_last_reset() -> None:
    tally = LossTally(CPU)
    assert tally.mean(reset=False) is None
    for v in (1.0, 2.0, 6.0):
        tally.add(torch.tensor(v, requires_grad=True) * 1.0)  # detached, no graph kept
    tally.fold()
    tally.add(torch.tensor(3.0))
    assert tally.mean(reset=False) == 3.0
    assert tally.mean(reset=True) == 3.0
    assert tally.mean(reset=False) is None
    tally.add(torch.tensor(5.0))
    assert tally.mean(reset=True) == 5.0


def test_fold_hands_the_guard_the_period_mean() -> None:
    tally, guard = LossTally(CPU), DivergenceGuard(CPU, factor=None)
    flags = torch.zeros(EXTRA_SLOTS)
    tally.add(torch.tensor(1.0))
    tally.add(torch.tensor(float("nan")))
    tally.fold(guard, flags)
    assert flags[DIVERGED] == 1.0  # a non-finite loss in the period is seen
    assert math.isnan(tally.mean(reset=False))


def test_clear_drops_pending_and_folded_losses() -> None:
    tally = LossTally(CPU)
    tally.add(torch.tensor(4.0))
    tally.fold()
    tally.add(torch.tensor(8.0))
    tally.clear()
    assert tally.mean(reset=False) is None
    tally.add(torch.tensor(2.0))
    assert tally.mean(reset=False) == 2.0
