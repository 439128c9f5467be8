"""The job's report as the executors and the service read it (corral.protocol.report.Report):
typed at the edge, a field of the wrong type refused in one line, nothing else trusted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.executors.jobfiles import JobFiles
from corral.executors.lifecycle import JobTable
from corral.protocol.report import REPORT_FILE, Report, Reporter, ReportError, write_report

TRAINER_DOC = {  # what corral.train writes (trainer._report), with the Reporter's time
    "time": 1_700_000_000.5, "state": "running", "launch": 2, "world_size": 4, "num_nodes": 1,
    "device": "cuda:0", "gpu_type": "a100", "batch": [16, 1], "total_bsz": 128, "steps": 40,
    "epoch": 1, "progress": 52.5, "samples": 5120, "loss": 0.25, "lr_scale": 1.5,
    "metrics": [[20, 0, 0.5], [40, 1, 0.75]], "estimator": {"grad": {"sqr": 1.0, "var": 2.0}},
    "resumed": {"checkpoint": "ckpt-1.pt", "steps": 20}, "first_step_time": 1_700_000_000.0,
    "pid": 4242, "events": [{"time": 1.0, "kind": "diverged", "message": "restored"}],
}


def test_a_trainers_report_reads_as_typed_fields_and_back_as_the_same_json() -> None:
    report = Report.parse(TRAINER_DOC)
    assert report.batch == (16, 1) and report.metrics[-1] == (40, 1, 0.75)
    assert report.launch == 2 and report.world_size == 4 and report.pid == 4242
    assert report.resumed is not None and report.resumed["steps"] == 20
    assert report.to_doc() == TRAINER_DOC


def test_the_file_is_written_as_older_services_read_it(tmp_path: Path) -> None:
    """The one writer (`write_report`, which the trainer's `Reporter` calls) writes a report
    byte for byte as the trainer wrote its dictionary before it was typed: same keys, order
    and values."""
    path = tmp_path / REPORT_FILE
    write_report(path, Report.parse(TRAINER_DOC))
    assert path.read_bytes() == json.dumps(TRAINER_DOC, separators=(",", ":")).encode()
    Reporter(path, interval_s=1.0).write(Report.parse({**TRAINER_DOC, "time": None}))
    doc = json.loads(path.read_text())
    assert list(doc) == list(TRAINER_DOC) and doc["time"] > TRAINER_DOC["time"]
    assert Report.read(path) == Report.parse({**TRAINER_DOC, "time": doc["time"]})


def test_a_field_of_the_wrong_type_is_refused_in_one_line_naming_it() -> None:
    for key, bad in (("steps", "many"), ("batch", [16]), ("launch", 1.5), ("world_size", True),
                     ("metrics", [[1, 2]]), ("resumed", "yes"), ("state", 3),
                     ("gpu_type", ["a100"])):
        with pytest.raises(ReportError) as refused:
            Report.parse({**TRAINER_DOC, key: bad})
        message = str(refused.value)
        assert "\n" not in message and repr(key) in message, message
    with pytest.raises(ReportError, match="JSON object"):
        Report.parse([1, 2])


def test_what_the_report_does_not_define_is_left_out() -> None:
    report = Report.parse({"steps": 3, "secret": "x" * 10_000, "events": [{"kind": "a"}, 7],
                           "loss": None})
    assert report.steps == 3 and report.loss is None and report.events == ({"kind": "a"},)
    assert "secret" not in report.to_doc() and Report.parse({}) == Report()


def test_the_job_files_read_a_refused_report_as_none(tmp_path: Path) -> None:
    files = JobFiles(tmp_path)
    path = files.report_path("j")
    assert files.report("j") is None  # none yet
    path.write_text(json.dumps({**TRAINER_DOC, "steps": "many"}))
    assert files.report("j") is None
    path.write_text(json.dumps(TRAINER_DOC))
    assert files.report("j") == Report.parse(TRAINER_DOC) == Report.read(path)
    assert path.name == REPORT_FILE


def test_the_job_table_has_no_abstract_hooks_left() -> None:
    """A backend is composed into the table (corral.executors.backend), not subclassed."""
    assert not JobTable.__abstractmethods__
