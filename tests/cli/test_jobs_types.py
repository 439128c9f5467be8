"""`corral jobs`' type column: the type a job runs on and the one it is restricted to, and no
column on a cluster without GPU types."""

from __future__ import annotations

from rich.console import Console

from corral.cli.main import app

live = __import__("corral.cli.live", fromlist=["live"])  # registered on `app` (imported first)
_gpu_type_text, _jobs_table = live._gpu_type_text, live._jobs_table
assert app is not None


def _row(job_id: str, status: str, runs: str | None, wanted: str | None = None,
         reported: str | None = None) -> dict:
    return {"id": job_id, "name": "train", "status": status, "gpus": 1, "batch": None,
            "steps": 0, "epoch": 0, "restarts": 0, "gpu_type": runs,
            "reported_gpu_type": reported, "spec": {"gpu_type": wanted}}


def test_type_text() -> None:
    assert _gpu_type_text(_row("a", "running", "t4")) == "t4"
    assert _gpu_type_text(_row("a", "queued", None)) == "-"
    assert _gpu_type_text(_row("a", "queued", None, "a100")) == "a100 only"
    assert _gpu_type_text(_row("a", "running", "a100", "a100")) == "a100 only"
    assert _gpu_type_text(_row("a", "running", "t4", "a100")) == "t4 (a100 only)"
    assert _gpu_type_text(_row("a", "done", None, reported="a100")) == "a100"
    assert _gpu_type_text(_row("a", "running", "")) == "-"  # the unnamed type


def _text(rows: list[dict]) -> str:
    console = Console(width=200, record=True)
    console.print(_jobs_table(rows))
    return console.export_text()


def test_the_type_column_is_shown_only_where_a_job_has_a_type() -> None:
    typed = _text([_row("job-1", "running", "t4"), _row("job-2", "queued", None, "a100")])
    assert " type " in typed and "a100 only" in typed and " t4 " in typed
    untyped = _text([_row("job-1", "running", ""), _row("job-2", "queued", None)])
    assert " type " not in untyped
