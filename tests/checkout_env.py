"""The environment for a subprocess the tests start: this checkout's `src` first on PYTHONPATH,
so the child runs the code under test, whichever corral is installed."""

from __future__ import annotations

import os
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def checkout_env() -> dict[str, str]:
    """os.environ with this checkout's `src` put before any PYTHONPATH already set."""
    path = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}
