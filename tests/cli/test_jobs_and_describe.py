"""`corral jobs` and `corral describe` as an operator reads them: the command whole at any width
however deep its directory (a clone at a long path once had its script folded mid-word at 80
columns), and each job's queue."""

from __future__ import annotations

import importlib
import io
import re
import time

from rich.console import Console

from corral.cli.main import app  # noqa: F401 - first: corral.cli.live registers on it
from corral.protocol.report import Report

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


def test_an_in_place_resize_is_no_restart_in_jobs_and_describe(monkeypatch) -> None:
    job = {**_job(None), "status": "running", "gpus": 2, "launches": 2, "restarts": 1,
           "in_place_resizes": 1, "batch": [16, 0]}
    out = io.StringIO()
    monkeypatch.setattr(live, "console", Console(file=out, width=160))
    live.console.print(live._jobs_table([job], 160, 1))
    header, row = out.getvalue().splitlines()[2], out.getvalue().splitlines()[4]
    cells = [c.strip() for c in row.split("│")[1:-1]]
    names = [c.strip() for c in header.split("┃")[1:-1]]
    assert cells[names.index("resized")] == "1" and cells[names.index("restarts")] == "0"
    assert live.restarts_text(job) == "0 restart(s), 1 in-place resize(s)"
    assert live.restarts_text({**job, "in_place_resizes": 0}) == "1 restart(s)"


def test_the_last_report_reads_as_words_not_json(monkeypatch) -> None:
    report = {"time": 1_700_000_000.0, "state": "running", "launch": 1, "world_size": 2,
              "gpu_type": "", "steps": 1146, "epoch": 27, "loss": 0.000136, "batch": [16, 0],
              "total_bsz": 32, "metrics": [[45, 1, 0.42], [1146, 27, 0.9889]],
              "resumed": {"steps": 732, "in_place": 1, "pause_s": 0.016}}
    text = live.report_text(Report.parse(report))
    assert "{" not in text and "1700000000" not in text
    assert time.strftime("%H:%M:%S", time.localtime(1_700_000_000.0)) in text
    for part in ("running", "2 worker(s)", "step 1146", "epoch 27", "loss 0.000136",
                 "batch 16x1 (step batch 32)", "metric 0.9889 at epoch 27",
                 "resumed in place at step 732, paused 0.02 s"):
        assert part in text, part


def test_corral_queues_prints_the_queue_changes_it_is_given(monkeypatch) -> None:
    import contextlib

    from typer.testing import CliRunner

    doc = {"queues": [{"name": "nlp", "parent": None, "quota": 3, "limit": None, "used": 1,
                       "borrowed": 0, "share": 2, "jobs": 2, "waiting": 1}],
           "changes": [{"time_s": 12.5, "detail": "nlp: quota 2->3"}], "min_runtime_s": 30.0,
           "usage_half_life_s": None}

    class Fake:
        def queues(self) -> dict:
            return doc

    monkeypatch.setattr(live, "_client", lambda *a: contextlib.nullcontext(Fake()))
    out = io.StringIO()
    monkeypatch.setattr(live, "console", Console(file=out, width=120))
    result = CliRunner().invoke(live.app, ["queues"])
    assert result.exit_code == 0, result.output
    assert "changed at 12.5 s: nlp: quota 2->3" in out.getvalue()


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
