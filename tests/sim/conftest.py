"""Fixtures for the simulator tests: the six Pollux applications' limits (data README table).

This folder goes on sys.path so test modules import its helpers as `import reference_run`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from corral.core.jobs import LrRule
from corral.sim.truth.base import AppLimits

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pollux_app_limits() -> dict[str, AppLimits]:
    """AppLimits of bert, cifar10, deepspeech2, imagenet, ncf and yolov3 as in the Pollux runs."""
    return {
        "bert": AppLimits("bert", 12, 384, 4, 12, 2, LrRule.SQRT),
        "cifar10": AppLimits("cifar10", 128, 4096, 32, 1024, 100, LrRule.ADASCALE),
        "deepspeech2": AppLimits("deepspeech2", 20, 640, 10, 80, 80, LrRule.ADASCALE),
        "imagenet": AppLimits("imagenet", 200, 12800, 20, 200, 90, LrRule.ADASCALE),
        "ncf": AppLimits("ncf", 256, 32768, 32, 32768, 10, LrRule.SQRT, adaptive=False,
                         fixed_bsz=32768),
        "yolov3": AppLimits("yolov3", 8, 512, 4, 8, 50, LrRule.ADASCALE),
    }


@pytest.fixture
def apps() -> dict[str, AppLimits]:
    return pollux_app_limits()
