"""The layers of docs/design.md hold: `lint-imports` checks the import-linter contracts in
pyproject.toml (one per row of the Layers table, and torch only in corral.train), so a test run
shows a broken layer as CI does."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from checkout_env import checkout_env

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports() -> str | None:
    beside = Path(sys.executable).with_name("lint-imports")
    return str(beside) if beside.exists() else shutil.which("lint-imports")


def test_import_contracts_are_kept() -> None:
    exe = _lint_imports()
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    done = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=240, env=checkout_env())  # this checkout's code
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
