"""Per-queue figures (`corral.sim.analysis.queue_metrics`), their place in summary.json and
report.html, and `corral simulate --queues/--quotas`."""

from __future__ import annotations

import json

from team_trace import COLUMNS, write_team_trace
from typer.testing import CliRunner

from corral.cli.main import app
from corral.core.jobs import JobSpec
from corral.core.queues import parse_queues
from corral.report.files import summary_document, write_outputs
from corral.sim.analysis.queue_metrics import queue_summary, resolve_queues, workload_queue_gpu_s
from corral.sim.loop.results import JobRecord, SimResult
from corral.sim.workloads.common import Workload

HALVES = "[queue.a]\nquota = 4\n[queue.b]\nquota = 4\n"


def _result() -> SimResult:
    # a borrows all 8 GPUs from 0 to 100; b's job arrives at 10 and runs from 60 (its quota
    # back at the reclaim), so b waited 50 s below its quota while a borrowed
    jobs = [JobRecord("a1", "cifar10", 0.0, 4, first_start_s=0.0, finish_s=200.0,
                      attained_gpu_s=800.0, run_time_s=200.0, fair_share_jct_s=100.0, queue="a"),
            JobRecord("a2", "cifar10", 0.0, 4, first_start_s=0.0, finish_s=300.0,
                      attained_gpu_s=240.0 + 4 * 140, queue_time_s=0.0, fair_share_jct_s=150.0,
                      queue="a"),
            JobRecord("b1", "cifar10", 10.0, 4, first_start_s=60.0, finish_s=160.0,
                      attained_gpu_s=400.0, queue_time_s=50.0, fair_share_jct_s=75.0, queue="b"),
            JobRecord("x", "cifar10", 0.0, 1, queue=None)]  # never finished, never ran
    allocations = {"a1": [(0.0, 4)], "a2": [(0.0, 4), (60.0, 0), (160.0, 4)],
                   "b1": [(60.0, 4)]}
    return SimResult("fifo", "w", 8, jobs, gpu_timeline=[(0.0, 8), (300.0, 0)],
                     allocations=allocations)


def test_per_queue_figures():
    tree = parse_queues(HALVES, total_gpus=8)
    out = queue_summary(_result(), tree)
    assert set(out) == {"a", "b", "default"}
    a, b = out["a"], out["b"]
    assert (a["jobs"], a["finished"], b["jobs"]) == (2, 2, 1)
    assert a["avg_jct_s"] == 250.0 and b["avg_jct_s"] == 150.0
    assert b["avg_queueing_s"] == 50.0
    assert b["longest_starved_s"] == 50.0  # waiting, below quota, while a borrowed
    assert a["longest_starved_s"] == 0.0  # a2 waited from 60 to 160, but a held its quota
    assert a["quota_gpus"] == 4 and a["guaranteed_gpu_hours"] == 4 * 300 / 3600
    assert a["gpu_hours"] == (800 + 800) / 3600
    assert b["ftf_mean"] == b["ftf_max"] == 2.0
    assert out["default"]["finished"] == 0 and out["default"]["avg_jct_s"] is None


def test_proportional_quotas_follow_the_traces_gpu_time():
    def spec(name: str, queue: str | None, gpus: int) -> JobSpec:
        return JobSpec(name, 0.0, "cifar10", gpus=gpus, batch_size=64, init_bsz=64, max_bsz=64,
                       min_local_bsz=8, max_local_bsz=64, queue=queue)
    w = Workload("w", [spec("j1", "a", 1), spec("j2", "b", 1), spec("j3", None, 1)], "test",
                 trace_gpu_s={"j1": 300.0, "j2": 100.0, "j3": 0.0})
    assert workload_queue_gpu_s(w) == {"a": 300.0, "b": 100.0, None: 0.0}
    tree = resolve_queues("proportional", w, 8)
    assert (tree.quota("a"), tree.quota("b"), tree.quota("default")) == (6, 2, 0)
    assert resolve_queues(tree, w, 8) is tree


def test_summary_json_and_the_report_carry_the_per_queue_figures(tmp_path):
    result = _result()
    figures = queue_summary(result, parse_queues(HALVES))
    doc = summary_document({"fifo": [result]}, queues={"fifo": [figures]})
    assert doc["policies"]["fifo"]["workloads"]["w"]["queues"]["b"]["longest_starved_s"] == 50.0
    assert "queues" not in summary_document({"fifo": [result]})["policies"]["fifo"]["workloads"]["w"]
    write_outputs(tmp_path, {"fifo": [result]}, queues={"fifo": [figures]})
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["policies"]["fifo"]["workloads"]["w"]["queues"]["a"]["jobs"] == 2
    page = (tmp_path / "report.html").read_text()
    assert "Per queue" in page and 'id="queues"' in page


def _trace(tmp_path):
    return write_team_trace(tmp_path, [(f"a{i}", i * 60, 2, 1800, "vision") for i in range(4)]
                            + [(f"b{i}", 600 + i * 60, 2, 1200, "nlp") for i in range(3)])


def test_simulate_with_queues_prints_a_per_queue_table(tmp_path):
    queues = tmp_path / "queues.toml"
    queues.write_text("[queue.vision]\nquota = 4\n[queue.nlp]\nquota = 4\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [
        "simulate", "-w", str(_trace(tmp_path)), "--columns",
        COLUMNS, "-p", "fifo",
        "--cluster", "2x4", "--queues", str(queues), "--no-lp-bound", "-j", "1",
        "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "per queue" in result.output and "vision" in result.output and "nlp" in result.output
    saved = json.loads((out / "summary.json").read_text())
    per = next(iter(saved["policies"]["fifo"]["workloads"].values()))["queues"]
    assert per["vision"]["jobs"] == 4 and per["nlp"]["jobs"] == 3
    proportional = CliRunner().invoke(app, [
        "simulate", "-w", str(_trace(tmp_path)), "--columns",
        COLUMNS, "-p", "fifo",
        "--cluster", "2x4", "--quotas", "proportional", "--no-lp-bound", "-j", "1"])
    assert proportional.exit_code == 0, proportional.output
    assert "vision" in proportional.output


def test_simulate_queue_errors_are_one_line(tmp_path):
    bad = tmp_path / "queues.toml"
    bad.write_text("[queue.vision]\nquota = 64\n")
    for args, needle in (
            (["--queues", str(bad)], 'queues.toml: queue "vision": quota 64 exceeds the cluster\'s 8 GPUs'),
            (["--quotas", "equal"], "--quotas 'equal'"),
            (["--queues", str(bad), "--quotas", "proportional"], "give one")):
        result = CliRunner().invoke(app, ["simulate", "-p", "fifo", "--cluster", "2x4",
                                          "--no-lp-bound", *args])
        assert result.exit_code == 2, result.output
        lines = [ln for ln in result.output.strip().splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0], result.output


def test_the_tenant_column_of_each_trace_format(tmp_path, apps):
    import pytest

    from corral.core.errors import InputError
    from corral.sim.workloads import load_workload

    philly = tmp_path / "philly.csv"
    philly.write_text("timestamp,duration,num_gpus,gpu_time,cluster,team\n"
                      "2017-10-01 00:00:00,600,1,600,vc1,t1\n"
                      "2017-10-01 00:10:00,600,2,1200,vc2,t2\n")
    assert [j.queue for j in load_workload(philly, apps).jobs] == ["vc1", "vc2"]
    named = load_workload(philly, apps, columns={"queue": "team"})
    assert [j.queue for j in named.jobs] == ["t1", "t2"]
    generic = load_workload(_trace(tmp_path), apps, columns={"queue": "team"})
    assert {j.queue for j in generic.jobs} == {"vision", "nlp"}
    plain = tmp_path / "plain.csv"
    plain.write_text("job_id,submit_time,num_gpus,duration,queue\n1,0,1,600,x\n2,5,1,600,\n")
    assert [j.queue for j in load_workload(plain, apps).jobs] == ["x", None]
    pollux = tmp_path / "pollux.csv"
    pollux.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,1,128\n")
    with pytest.raises(InputError, match="applies to Philly and duration-based traces"):
        load_workload(pollux, apps, columns={"queue": "team"})
