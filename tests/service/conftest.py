"""Shared fixtures of the service tests: the test-only elastic policy, a store and a fake
executor (fakes.FakeExecutor)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

# The helpers beside this file (livecluster, share_policy) import as top-level modules in the
# test modules of this folder: `import livecluster as live`.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakes import FakeExecutor  # noqa: E402


def load_share_policy() -> None:
    """Register `test-share` (importing the module registers it, once per session)."""
    importlib.import_module("share_policy")


@pytest.fixture
def store(tmp_path: Path):
    from corral.service.store import Store

    s = Store(tmp_path / "state.db")
    s.set_meta("origin", "0")
    yield s
    s.close()


@pytest.fixture
def fake_executor() -> FakeExecutor:
    return FakeExecutor()


@pytest.fixture
def share_policy() -> str:
    load_share_policy()
    return "test-share"
