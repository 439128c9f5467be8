"""Every table the CLI prints stays readable at 80 and 120 columns (issue 37 item 2): the columns
that matter first, the rest behind --wide (or --json), no name or number cut to an ellipsis."""

from __future__ import annotations

import io
import json
import re
from types import SimpleNamespace

import pytest
from rich.console import Console
from typer.testing import CliRunner

from corral.cli.autoscale_cmd import autoscale_table
from corral.cli.main import app, calibration_table, console
from corral.cli.replay_cmd import replay_table
from corral.report.tables import METRIC_COLUMNS, comparison_table, per_workload_tables

WIDTHS = (80, 120)
POLICIES = ("fifo", "tiresias-las", "optimus-oracle", "pollux", "srtf")
SUMMARY = {"avg_jct_s": 12307.4, "p50_jct_s": 2280.0, "p99_jct_s": 15479.0, "makespan_s": 88201.0,
           "avg_queue_s": 1340.0, "ftf_p99": 76.96, "ftf_max": 178.07, "restarts_per_job": 0.0,
           "gpu_util": 0.723, "lower_bound_ratio": 4.55, "lp_bound_avg_jct_s": 570.0, "gap": 4.04,
           "wall_s": 120.3}
SHOWN_AT_80 = ("12307 s", "15479 s", "88201 s", "72.3%")  # avg JCT, p99, makespan, GPU util


def render(renderable, width: int) -> str:
    out = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    out.print(renderable)
    return out.export_text()


def assert_whole(text: str, width: int, values) -> None:
    """Nothing cut: no ellipsis, no line past the width, every value there in one piece."""
    assert "…" not in text, text
    assert max(len(line) for line in text.splitlines()) <= width, text
    for value in values:
        assert value in text, (value, text)


@pytest.mark.parametrize("width", WIDTHS)
def test_comparison_table_fits_one_workload(width):
    table = comparison_table([(p, "default", SUMMARY) for p in POLICIES], width=width)
    text = render(table, width)
    assert_whole(text, width, (*POLICIES, *SHOWN_AT_80, "workload default"))
    headers = [c.header for c in table.columns]
    assert headers[:2] == ["policy", "avg JCT"]  # the workload is in the title
    assert len(headers) < 1 + len(METRIC_COLUMNS)  # not every metric fits at 120
    assert "--wide" in text  # the caption says where the others are


@pytest.mark.parametrize("width", WIDTHS)
def test_comparison_table_fits_many_workloads_and_a_stopped_run(width):
    rows = [(p, w, SUMMARY) for p in ("optimus-oracle", "tiresias-las")
            for w in ("philly-busiest-8h", "mean")]
    stopped = dict(SUMMARY, stopped="3 of 40 job(s) did not finish: the emulation took longer "
                                    "than 3600 s (real)")
    rows.append(("pollux", "philly-busiest-8h", stopped))
    text = render(comparison_table(rows, width=width), width)
    assert_whole(text, width, ("optimus-oracle", "tiresias-las", "philly-busiest-8h", "mean",
                               "12307 s"))
    words = re.sub(r"[│┃\s]+", " ", text)
    assert "the emulation took longer" in words  # prose wraps between words, is not cut


def test_comparison_table_leaves_a_column_of_dashes_last():
    rows = [(p, "default", dict(SUMMARY, gap=None, lp_bound_avg_jct_s=None)) for p in POLICIES]
    headers = [c.header for c in comparison_table(rows, width=120).columns]
    assert "gap" not in headers and "LB ratio" in headers


def test_comparison_table_without_width_has_every_column():
    table = comparison_table([("pollux", "w", SUMMARY)])
    assert [c.header for c in table.columns] == ["policy", "workload",
                                                 *(h for h, _, _ in METRIC_COLUMNS)]


@pytest.mark.parametrize("width", WIDTHS)
def test_per_workload_tables_split_by_policies(width):
    names = (*POLICIES, "pollux-with-a-long-name", "optimus-oracle-2")
    by_policy = {p: {f"workload-{i}": SUMMARY for i in range(3)} for p in names}
    tables = per_workload_tables(by_policy, width)
    text = "".join(render(t, width) for t in tables)
    assert_whole(text, width, (*names, "workload-0", "mean", "12307 s"))
    assert len(tables) > 1
    assert len(per_workload_tables(by_policy, None)) == 1


JOBS = [{"id": f"job-{i}", "name": name, "status": status, "gpus": gpus, "batch": [64, 1],
         "steps": 123456, "epoch": 17, "loss": 0.012345, "metric": 0.9123, "launches": 3,
         "preemptions": 1, "crash_retries": 0, "restarts": 2, "message": message}
        for i, (name, status, gpus, message) in enumerate([
            ("train_imagenet_resnet50.py", "running", 8, None),
            ("bert-finetune", "queued", 0, None),
            ("cifar10", "failed", 0, "worker 0 exited with status 1 after 3 retries "
                                     "(see corral logs job-2)")], start=1000)]


class FakeClient:
    def __init__(self, *_):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def jobs(self):
        return JOBS

    def jobs_page(self, limit=100, after=None, *, newest_first=False, **filters):
        """GET /jobs's newest-first page, as `corral jobs` asks for it."""
        rows = (JOBS[::-1] if newest_first else JOBS)[:limit]
        return {"jobs": rows, "total": len(JOBS), "next": None}

    def job(self, job_id):
        return DESCRIBED

    def telemetry(self, job_id):
        return TELEMETRY


@pytest.fixture
def cli(monkeypatch):
    """`corral ...` against a fake service, its console `width` columns wide."""
    monkeypatch.setattr("corral.cli.live._client", lambda *a: FakeClient())

    def run(width, *args):
        monkeypatch.setattr(console, "width", width)
        result = CliRunner().invoke(app, list(args))
        assert result.exit_code == 0, result.output
        return result.stdout

    return run


@pytest.mark.parametrize("width", WIDTHS)
def test_jobs_table_fits(cli, width):
    text = cli(width, "jobs")
    assert_whole(text, width, ("job-1000", "job-1002", "train_imagenet_resnet50.py",
                               "bert-finetune", "running", "queued", "failed"))
    if width >= 120:
        assert "64x2" in text and "123456" in text
    words = re.sub(r"[│┃\s]+", " ", text)
    assert "worker 0 exited with status 1" in words
    assert "--wide or --json" in text


def test_jobs_wide_and_json(cli):
    text = cli(80, "jobs", "--wide")
    assert "…" not in text
    for header in ("id", "name", "status", "gpus", "batch", "steps", "epoch", "loss", "metric",
                   "launches", "preempted", "retries", "restarts", "message"):
        assert header in text
    assert json.loads(cli(80, "jobs", "--json")) == JOBS


DESCRIBED = {
    "id": "job-1000", "name": "train_imagenet_resnet50.py", "status": "running", "gpus": 8,
    "placement": "node-0:0,1,2,3 node-1:0,1,2,3", "steps": 123456, "epoch": 17, "launches": 3,
    "restarts": 2, "message": None,
    "spec": {"command": ["python", "/home/someone/projects/imagenet/train_imagenet_resnet50.py",
                         "--data", "/datasets/imagenet"], "min_gpus": 1, "max_gpus": 16},
    "events": [{"time_s": 12345.6, "kind": "submitted", "detail": "by someone"},
               {"time_s": 12399.1, "kind": "resumed",
                "detail": "from /home/someone/.corral/checkpoints/job-1000/step-120000.pt"}],
    "assignments": [{"time_s": 12360.0, "placement": "node-0:0,1,2,3 node-1:0,1,2,3",
                     "num_gpus": 8, "batch": [64, 1]}],
    "report": {"steps": 123456, "loss": 0.0123},
}
TELEMETRY = [{"launch": 3, "time_s": 12400.5, "world_size": 8, "local_bsz": 64,
              "accum_steps": 1, "resumed_steps": 120000}]


@pytest.mark.parametrize("width", WIDTHS)
def test_describe_fits(cli, width):
    text = cli(width, "describe", "job-1000")
    tables = "\n".join(line for line in text.splitlines()[1:]
                       if not line.startswith(("command:", "checkpoints:", "last report:"))
                       )  # lines that wrap, or (the command) are never cut
    assert_whole(tables, width, ("job-1000", "12345.6", "12399.1", "submitted", "resumed",
                               "12400.5", "120000", "64x2", "node-0:0,1,2,3"))
    joined = re.sub(r"[│┃\s]+", "", text)  # a long path folds onto the next line, whole
    assert "/home/someone/.corral/checkpoints/job-1000/step-120000.pt" in joined


@pytest.mark.parametrize("width", WIDTHS)
def test_policies_table_fits(monkeypatch, width):
    from corral.policies import policy_names

    monkeypatch.setattr(console, "width", width)
    result = CliRunner().invoke(app, ["policies"])
    assert result.exit_code == 0, result.output
    assert_whole(result.stdout, width, policy_names())


@pytest.mark.parametrize("width", WIDTHS)
def test_workloads_table_fits(monkeypatch, tmp_path, width):
    csv = tmp_path / "a-workload-with-a-rather-long-file-name.csv"
    csv.write_text("name,time,application,num_replicas,batch_size\n"
                   "job-a,0,cifar10,2,128\njob-b,30,imagenet,8,1200\n")
    monkeypatch.setattr(console, "width", width)
    result = CliRunner().invoke(app, ["workloads", str(csv)])
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= width


@pytest.mark.parametrize("width", WIDTHS)
def test_replay_autoscale_and_calibrate_tables_fit(monkeypatch, width):
    monkeypatch.setattr(console, "width", width)
    o = SimpleNamespace(name="checkpoint-restart", start_s=12.34, grow_s=5.6, shrink_s=1.2)
    rows = [SimpleNamespace(job_id="job-1000", app="imagenet", real_jct_s=123456.7,
                            sim_jct_s=None, error=None),
            SimpleNamespace(job_id="job-1001", app="bert", real_jct_s=9876.5, sim_jct_s=9999.9,
                            error=0.0125)]
    text = render(replay_table(rows, "pollux", "tiresias-las", o), width)
    assert_whole(text, width, ("job-1000", "imagenet", "123456.7", "unfinished", "9999.9",
                               "+1.2%"))
    results = [SimpleNamespace(autoscaler="goodput (Pollux)", jct_s=19836.0, node_hours=58.7,
                               gpu_hours=234.8, resizes=5, max_nodes_used=16),
               SimpleNamespace(autoscaler="throughput (Or et al.)", jct_s=None,
                               node_hours=72.2, gpu_hours=288.8, resizes=4, max_nodes_used=16)]
    text = render(autoscale_table(results, "auto-scaling imagenet on 4-GPU nodes"), width)
    assert_whole(text, width, ("goodput (Pollux)", "throughput (Or et al.)", "5.51 h",
                               "unfinished", "234.8", "288.8"))
    errors = {m: {"step_time_mre": 0.0123, "step_time_max_re": 0.4567, "efficiency_mre": 0.089,
                  "efficiency_max_re": 1.2346} for m in ("imagenet", "deepspeech2", "yolov3")}
    text = render(calibration_table(errors, "/data/pollux/profiles"), width)
    assert_whole(text, width, ("imagenet", "deepspeech2", "1.2%", "45.7%", "8.9%", "123.5%"))


def test_simulate_at_80_columns_then_wide(monkeypatch, tmp_path):
    csv = tmp_path / "w.csv"
    csv.write_text("name,time,application,num_replicas,batch_size\n"
                   "a,0,cifar10,2,128\nb,10,cifar10,4,256\nc,20,cifar10,1,128\n")
    monkeypatch.setattr(console, "width", 80)
    args = ["simulate", "-w", str(csv), "-p", "fifo,optimus-oracle", "-j", "1", "--no-lp-bound"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    table = result.stdout[:result.stdout.index("more column")]
    assert_whole(table, 80, ("fifo", "optimus-oracle", "avg JCT", "makespan", "workload w"))
    assert "wall" not in table
    result = CliRunner().invoke(app, [*args, "--wide"])
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    for header, _, _ in METRIC_COLUMNS:
        assert header in result.stdout


@pytest.mark.parametrize("width", WIDTHS)
def test_per_queue_table_fits(width):
    from corral.report.queues import queue_table

    figures = {"jobs": 3037, "finished": 3001, "quota_gpus": 520, "avg_jct_s": 43308.2,
               "avg_queueing_s": 12011.0, "gpu_hours": 10234.5, "guaranteed_gpu_hours": 12480.0,
               "received_vs_guaranteed": 0.82, "longest_starved_s": 805.0, "ftf_mean": 7.03,
               "ftf_max": 112.5}
    runs = [(p, "philly-busiest-day", {"b436b2": figures, "vc-with-a-long-name": figures})
            for p in ("tiresias-las", "pollux")]
    text = render(queue_table(runs, width), width)
    assert_whole(text, width, ("tiresias-las", "b436b2", "vc-with-a-long-name", "43308 s",
                               "805 s"))
    assert "--wide" in text  # the columns left out are named
    every = render(queue_table(runs, None), 400)
    assert "3037" in every and "philly-busiest-day" in every
