"""`corral describe` shows what a job runs whole at any terminal width, however deep its
directory: a clone at a long path once had its script's name folded mid-word at 80 columns."""

from __future__ import annotations

import importlib
import io

from rich.console import Console

from corral.cli.main import app  # noqa: F401 - first: corral.cli.live registers on it

live = importlib.import_module("corral.cli.live")


def test_describe_shows_a_deep_command_whole_at_80_columns(monkeypatch) -> None:
    script = "/home/someone/" + "a-rather-long-directory-name/" * 6 + "tiny_job.py"
    job = {"id": "job-1", "name": "tiny_job", "status": "queued", "gpus": 0, "placement": "",
           "steps": 0, "epoch": 0, "launches": 0, "restarts": 0,
           "spec": {"command": ["python", script, "--epochs", "2"]},
           "events": [{"time_s": 0.0, "kind": "submitted", "detail": f"python {script}"}],
           "assignments": []}
    out = io.StringIO()
    monkeypatch.setattr(live, "console", Console(file=out, width=80))
    live._describe(job, [])
    lines = out.getvalue().splitlines()
    assert f"command: python {script} --epochs 2" in lines
