"""The README's dataset examples work from an empty cache: each `corral data fetch` line runs
against a loopback mirror of the published files, then the `corral simulate` lines that read
what it fetched run on it (under fifo alone, to stay quick)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from loopback import serve  # noqa: F401 - the fixture

from corral import datasets

ROOT = Path(__file__).resolve().parents[1]
CACHE = "~/.cache/corral"


def _readme_commands(prefix: str) -> list[list[str]]:
    lines = [ln.split("#", 1)[0].strip() for ln in (ROOT / "README.md").read_text().splitlines()]
    return [shlex.split(ln)[1:] for ln in lines if ln.startswith(prefix)]


def test_the_readme_fetches_then_simulates_on_what_it_fetched(serve, tmp_path) -> None:
    shared = datasets.shared_data_dir()
    if not shared.is_dir():
        pytest.skip("the team's data checkout (../shared/data) is what the loopback mirror serves")
    url, _ = serve(shared)
    fetches = _readme_commands("corral data fetch")
    simulations = [c for c in _readme_commands("corral simulate") if any(CACHE in a for a in c)]
    assert fetches and len(simulations) >= 2, "the README's dataset examples are gone"
    env = {**os.environ, datasets.MIRROR_ENV: url, "XDG_CACHE_HOME": str(tmp_path / "xdg"),
           "PYTHONPATH": str(ROOT / "src")}
    for args in fetches:
        done = subprocess.run([sys.executable, "-m", "corral", *args], capture_output=True,
                              text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    cache = str(tmp_path / "xdg" / "corral")
    for args in simulations:
        args = [a.replace(CACHE, cache) for a in args]
        if "-p" in args:  # fifo alone: the paths and options are what this checks
            del args[args.index("-p"):args.index("-p") + 2]
        done = subprocess.run([sys.executable, "-m", "corral", *args, "-p", "fifo",
                               "--no-lp-bound"], capture_output=True, text=True, timeout=300,
                              env=env)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "fifo" in done.stdout
