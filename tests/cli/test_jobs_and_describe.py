"""`corral jobs` and `corral describe` as an operator reads them: the command whole at any width
however deep its directory (a clone at a long path once had its script folded mid-word at 80
columns), and each job's queue."""

from __future__ import annotations

import importlib
import io
import re

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


def _job(queue: str | None) -> dict:
    return {"id": "job-7", "name": "bert", "status": "queued", "gpus": 0, "placement": "",
            "steps": 0, "epoch": 0, "launches": 0, "restarts": 0, "batch": None,
            "spec": {"command": ["python", "train.py"], "queue": queue},
            "events": [], "assignments": []}


def test_an_operator_sees_each_jobs_queue_in_jobs_and_describe(monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(live, "console", Console(file=out, width=120))
    live.console.print(live._jobs_table([_job("nlp"), _job(None)], 120, 2))
    live._describe(_job("nlp"), [])
    text = out.getvalue()
    assert "queue" in text.splitlines()[2] and " nlp " in text  # a column, then its cell
    assert "job-7 bert (queue nlp): queued" in text
    bare = io.StringIO()
    monkeypatch.setattr(live, "console", Console(file=bare, width=120))
    live.console.print(live._jobs_table([_job(None)], 120, 1))  # no queues: no column
    assert not re.search(r"\bqueue\b", bare.getvalue())


def test_a_waiting_jobs_reason_shows_in_jobs_as_a_word_and_whole_in_describe(monkeypatch) -> None:
    waiting = {**_job("nlp"), "reason": {
        "kind": "quota", "queue": "nlp",
        "text": "queue nlp holds its quota 2/2 and nothing is idle to borrow"}}
    running = {**_job("nlp"), "id": "job-8", "status": "running", "gpus": 2,
               "reason": {"kind": "ranked_lower", "queue": "nlp", "text": "from its last wait"}}
    out = io.StringIO()
    monkeypatch.setattr(live, "console", Console(file=out, width=120))
    live.console.print(live._jobs_table([waiting, running], 120, 2))
    live._describe(waiting, [])
    live._describe(running, [])
    text = out.getvalue()
    assert "why" in text.splitlines()[2] and " quota " in text
    assert "ranked lower" not in text  # a running job shows no reason
    assert "waiting: quota: queue nlp holds its quota 2/2 and nothing is idle to borrow" in text
    assert "from its last wait" not in text
    bare = io.StringIO()
    monkeypatch.setattr(live, "console", Console(file=bare, width=120))
    live.console.print(live._jobs_table([running], 120, 1))  # none waits: no column
    assert not re.search(r"\bwhy\b", bare.getvalue())
