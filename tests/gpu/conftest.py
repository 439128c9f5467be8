"""GPU tests: every test here carries the `gpu` marker and skips, saying why, without CUDA."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# the live-service helpers of tests/service (livecluster) import as top-level modules
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().parent == here:
            item.add_marker(pytest.mark.gpu)


def _cuda_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"no CUDA GPU visible to torch {torch.__version__} (CPU-only build or no device)"
    return None


@pytest.fixture(autouse=True)
def _needs_cuda() -> None:
    reason = _cuda_reason()
    if reason:
        pytest.skip(reason)
