"""`corral simulate --queues/--quotas` on a cluster of several GPU types: quotas per type, an
untyped tree, proportional quotas, and a typed quota naming a type the cluster lacks. The
runs write summary.json without the plots and report.html (a third of the test's time; the
report's per-queue figures are tested in test_queue_metrics.py)."""

from __future__ import annotations

import json
from functools import partial

import pytest
from team_trace import COLUMNS, write_team_trace
from typer.testing import CliRunner

import corral.report
from corral.cli.main import app

MIXED = "k80:2x4,v100:2x4"


def _trace(tmp_path):
    return write_team_trace(
        tmp_path, [(f"a{i}", i * 60, (1, 2, 4, 8)[i % 4], 1800, "vision") for i in range(6)]
        + [(f"b{i}", 600 + i * 60, (4, 2, 8, 1)[i % 4], 1200, "nlp") for i in range(6)])


def _simulate(tmp_path, *args: str):
    return CliRunner().invoke(app, ["simulate", "-w", str(_trace(tmp_path)), "--columns", COLUMNS,
                                    "-p", "fifo,pollux", "--cluster", MIXED, "--no-lp-bound",
                                    "-j", "1", *args])


@pytest.mark.slow
def test_simulate_runs_typed_untyped_and_proportional_quotas_on_a_mixed_cluster(tmp_path,
                                                                                monkeypatch):
    monkeypatch.setattr(corral.report, "write_outputs",
                        partial(corral.report.write_outputs, plots=False))
    typed = tmp_path / "typed.toml"
    typed.write_text("[queue.vision]\nquota = { k80 = 4, v100 = 4 }\n"
                     "[queue.nlp]\nquota = { k80 = 4 }\nlimit = { v100 = 2 }\n")
    untyped = tmp_path / "untyped.toml"
    untyped.write_text("[queue.vision]\nquota = 8\n[queue.nlp]\nquota = 8\n")
    for args in (["--queues", str(typed)], ["--queues", str(untyped)],
                 ["--quotas", "proportional"]):
        out = tmp_path / "out"
        result = _simulate(tmp_path, *args, "--out", str(out))
        assert result.exit_code == 0, (args, result.output)
        assert "FAILED" not in result.output, (args, result.output)
        saved = json.loads((out / "summary.json").read_text())
        for policy in ("fifo", "pollux"):
            per = next(iter(saved["policies"][policy]["workloads"].values()))["queues"]
            assert per["vision"]["finished"] == per["nlp"]["finished"] == 6, (args, per)
        if args[1] == str(typed):
            assert per["vision"]["quota_gpus"] == 8 and per["nlp"]["quota_gpus"] == 4


def test_a_typed_quota_naming_a_type_the_cluster_lacks_is_one_line(tmp_path):
    bad = tmp_path / "queues.toml"
    bad.write_text("[queue.vision]\nquota = { a100 = 4 }\n")
    result = _simulate(tmp_path, "--queues", str(bad))
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and 'queues.toml: queue "vision": quota names GPU type "a100"' in \
        lines[0], result.output
