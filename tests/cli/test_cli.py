"""The `corral` command: the default run, outputs, and one-line errors for bad input."""

from __future__ import annotations

import json

import datafiles
import pytest
from checkout_env import checkout_env
from typer.testing import CliRunner

from corral.cli.main import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture
def no_png(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plots written as an 8-byte PNG signature: for tests that read none of a run's plots
    (rendering its six PNGs took most of a default run's time); test_default_simulate_prints_
    comparison and tests/report render them for real."""
    monkeypatch.setattr("corral.report.plots.png_bytes", lambda fig: b"\x89PNG\r\n\x1a\n")


def assert_one_line_error(result, needle: str) -> None:
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    assert needle in text
    assert "Traceback" not in text
    assert len([ln for ln in text.splitlines() if ln.strip()]) == 1, text


def test_default_simulate_prints_comparison(tmp_path):
    result = invoke("simulate", "-p", "fifo,srtf", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "fifo" in result.output and "srtf" in result.output and "avg JCT" in result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    fifo = summary["policies"]["fifo"]["mean"]
    srtf = summary["policies"]["srtf"]["mean"]
    assert srtf["avg_jct_s"] <= fifo["avg_jct_s"]
    assert fifo["lower_bound_avg_jct_s"] <= srtf["avg_jct_s"]
    assert (tmp_path / "jobs.csv").read_text().count("\n") == 1 + 2 * 40
    assert (tmp_path / "jct_cdf.png").read_bytes()[:4] == b"\x89PNG"


def test_unknown_policy():
    assert_one_line_error(invoke("simulate", "-p", "nope"), "unknown policy 'nope'")


def test_unknown_parameter():
    assert_one_line_error(invoke("simulate", "-p", "fifo", "--set", "fifo.bogus=1"), "no parameter 'bogus'")


def test_bad_parameter_value():
    assert_one_line_error(invoke("simulate", "-p", "fifo", "--set", "fifo.backfill=maybe"), "fifo.backfill")


def test_missing_workload_file(tmp_path):
    assert_one_line_error(invoke("simulate", "-w", str(tmp_path / "none.csv")), "none.csv")


def test_malformed_workload_names_row(tmp_path):
    bad = tmp_path / "w.csv"
    bad.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,2,128\nb,zz,cifar10,2,128\n")
    result = invoke("simulate", "-p", "fifo", "-w", str(bad))
    assert_one_line_error(result, "row 3")


def test_job_bigger_than_cluster(tmp_path):
    w = tmp_path / "w.csv"
    w.write_text("name,time,application,num_replicas,batch_size\nbig,0,cifar10,16,2048\n")
    assert_one_line_error(invoke("simulate", "-p", "fifo", "-w", str(w), "--cluster", "2x4"),
                          "asks for 16 GPUs but the cluster (2x4) has 8")


def test_bad_cluster_and_profiles(tmp_path):
    assert_one_line_error(invoke("simulate", "--cluster", "sixteen"), "cluster 'sixteen'")
    assert_one_line_error(invoke("simulate", "--profiles", str(tmp_path / "p")), "not found")


def test_cluster_file(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("# uneven nodes\nbig 8\nbig2 8\nsmall 4\n")
    result = invoke("simulate", "-p", "fifo", "--cluster", str(f), "--no-lp-bound")
    assert result.exit_code == 0, result.output
    assert "20 GPUs" in result.output


def test_policies_lists_parameters():
    result = invoke("policies")
    assert result.exit_code == 0
    assert "fifo" in result.output and "backfill=False" in result.output and "oracle" in result.output


def test_workloads_describes_file(tmp_path):
    w = tmp_path / "w.csv"
    w.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,2,128\nb,60,bert,1,12\n")
    result = invoke("workloads", str(w), "--json")
    assert result.exit_code == 0, result.output
    assert "cifar10" in result.output and "bert" in result.output


@pytest.mark.slow
def test_calibrate_writes_catalog(tmp_path):
    profiles = datafiles.need("pollux-profiles")
    out = tmp_path / "cat.json"
    result = invoke("calibrate", str(profiles), "-o", str(out))
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert set(doc["models"]) >= {"cifar10", "imagenet"} and "Pollux" in doc["source"]
    result = invoke("simulate", "-p", "fifo", "--catalog", str(out), "--no-lp-bound")
    assert result.exit_code == 0, result.output


def test_submit_refuses_what_the_service_would_in_one_line(tmp_path):
    # checked before any service is contacted (none runs here)
    assert_one_line_error(invoke("submit", "--cwd", str(tmp_path / "missing"), "--", "python", "x.py"),
                          f"--cwd {tmp_path / 'missing'}: no such directory")
    # an argument that is not valid UTF-8 arrives in Python as a lone surrogate (surrogateescape)
    assert_one_line_error(invoke("submit", "--cwd", str(tmp_path), "--", "python", "\udcff.py"),
                          "invalid submission: command.1: ")
    assert_one_line_error(invoke("submit", "--cwd", str(tmp_path), "--env", "A B=1", "--",
                                 "python", "x.py"), "env key 'A B' is not a variable name")
    assert_one_line_error(invoke("submit", "--cwd", str(tmp_path), "--batch-size", str(10 ** 30),
                                 "--", "python", "x.py"), "batch_size")
    assert_one_line_error(invoke("submit", "--cwd", str(tmp_path), "--epochs", "0", "--",
                                 "python", "x.py"), "epochs")


def test_submit_declares_the_epochs_it_is_given(tmp_path, monkeypatch):
    """`--epochs N` travels in the submission (a length-aware policy reads it as the job's
    declared length); without it the field is left out, so the service's default holds."""
    import contextlib

    from corral.cli import live

    sent: list[dict] = []

    class Client:
        def submit(self, body: dict) -> dict:
            sent.append(body)
            return {"id": "job-1"}

    monkeypatch.setattr(live, "_client", lambda *a: contextlib.nullcontext(Client()))
    for args in (("--epochs", "12"), ()):
        result = invoke("submit", "--cwd", str(tmp_path), *args, "--", "python", "x.py")
        assert result.exit_code == 0 and "job-1" in result.output, result.output
    assert sent[0]["epochs"] == 12 and "epochs" not in sent[1]


@pytest.mark.slow
def test_window_and_worker_processes(tmp_path, no_png):
    trace = datafiles.need("tiresias") / "60_job.csv"
    result = invoke("simulate", "-w", str(trace), "--window", "600:1", "-p", "fifo,srtf",
                    "--jobs", "2", "--cluster", "8x4", "--out", str(tmp_path), "--no-lp-bound")
    assert result.exit_code == 0, result.output
    assert "peak memory (RSS)" in result.output and "stopped early" not in result.output
    doc = json.loads((tmp_path / "summary.json").read_text())
    fifo = doc["policies"]["fifo"]["workloads"]["60_job-600:1"]
    assert fifo["stopped"] is None and fifo["unfinished"] == 0
    assert 0 < fifo["finished"] < 60  # submitted in [600 s, 1 h 10 min) only


def test_resume_takes_the_cells_an_earlier_run_kept(tmp_path, no_png):
    first = invoke("simulate", "-p", "fifo", "--out", str(tmp_path), "-j", "1", "--no-lp-bound")
    assert first.exit_code == 0, first.output
    assert len(list((tmp_path / "cells").glob("*.json"))) == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    again = invoke("simulate", "-p", "fifo,srtf", "--out", str(tmp_path), "--resume", "-j", "1",
                   "--no-lp-bound")
    assert again.exit_code == 0, again.output
    assert "1 of 2 simulation(s) taken from" in again.output
    resumed = json.loads((tmp_path / "summary.json").read_text())["policies"]["fifo"]
    assert {k: v for k, v in resumed["mean"].items() if k != "wall_s"} == {
        k: v for k, v in summary["policies"]["fifo"]["mean"].items() if k != "wall_s"}


def test_no_plots_writes_the_files_and_report_builds_the_page_later(tmp_path, no_png):
    result = invoke("simulate", "-p", "fifo", "--out", str(tmp_path), "-j", "1", "--no-lp-bound",
                    "--no-plots")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "summary.json").exists() and (tmp_path / "jobs.csv").exists()
    assert not list(tmp_path.glob("*.png")) and not (tmp_path / "report.html").exists()
    drawn = invoke("report", str(tmp_path))
    assert drawn.exit_code == 0, drawn.output
    assert "GPUs per job over time" in (tmp_path / "report.html").read_text()


def test_resume_needs_out():
    assert_one_line_error(invoke("simulate", "--resume"), "--resume needs --out")


def test_window_needs_a_trace():
    assert_one_line_error(invoke("simulate", "--window", "all"), "--window needs a trace")


def test_python_dash_m_corral_is_the_command() -> None:
    import subprocess
    import sys

    env = checkout_env()  # this checkout's corral
    done = subprocess.run([sys.executable, "-m", "corral", "policies"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pollux" in done.stdout and "tiresias-las" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "corral", "simulate", "-p", "nope"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "unknown policy" in bad.stderr + bad.stdout
    assert "Usage: corral" in subprocess.run([sys.executable, "-m", "corral", "--help"],
                                             capture_output=True, text=True, env=env,
                                             timeout=120).stdout


def test_seed_draws_the_built_in_workload_and_seeds_randomized_policies(tmp_path,
                                                                         no_png) -> None:
    from corral.sim.batch.sweep import parse_settings
    from corral.sim.truth.source import TruthSource
    from corral.sim.workloads import builtin_default

    apps = TruthSource.of(None, None).load().limits()
    assert builtin_default(apps) == builtin_default(apps, seed=0)
    assert builtin_default(apps, seed=1).jobs != builtin_default(apps).jobs
    choices = {c.name: c.overrides for c in parse_settings(["fifo", "pollux", "ones"], [], seed=7)}
    assert choices == {"fifo": {}, "pollux": {"seed": "7"}, "ones": {"seed": "7"}}
    explicit = parse_settings(["pollux", "ones"], ["pollux.seed=3"], seed=7)
    assert [c.overrides for c in explicit] == [{"seed": "3"}, {"seed": "7"}]
    one = invoke("simulate", "-p", "fifo", "--seed", "1", "--jobs", "1", "--out", str(tmp_path),
                 "--no-lp-bound")
    assert one.exit_code == 0, one.output
    rows = (tmp_path / "jobs.csv").read_text().splitlines()[1:]
    drawn = builtin_default(apps, seed=1).jobs
    assert sorted((r.split(",")[2], r.split(",")[3]) for r in rows) == \
        sorted((j.name, j.app) for j in drawn)
    assert [round(float(r.split(",")[4]), 3) for r in rows] == \
        [round(j.submit_time_s, 3) for j in drawn]


def test_an_elastic_request_above_the_largest_type(tmp_path):
    """Capped for a policy that chooses the count, with one warning line; refused, naming the
    job, for a fixed-size one (issue 44 item 4)."""
    w = tmp_path / "w.csv"
    w.write_text("name,time,application,num_replicas,batch_size\nbig,0,cifar10,12,256\n"
                 "small,5,cifar10,2,128\n")
    args = ["simulate", "-w", str(w), "--cluster", "k80:2x4,v100:1x8", "--no-lp-bound", "-j", "1"]
    assert_one_line_error(invoke(*args, "-p", "fifo"),
                          "job big in w asks for 12 GPUs but a job runs on one GPU type")
    result = invoke(*args, "-p", "pollux")
    assert result.exit_code == 0, result.output
    warned = [ln for ln in result.output.splitlines() if "warning:" in ln]
    assert len(warned) == 1 and "big 12 -> 8" in warned[0], result.output


def test_todays_gpu_types_run_out_of_the_box_and_gpu_speed_describes_others(tmp_path):
    """issue 44 item 4: the built-in catalog knows a100 (and h100, l4); --gpu-speed describes a
    type it lacks; a bad description is one line."""
    w = tmp_path / "w.csv"
    w.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,2,128\n")
    args = ["simulate", "-w", str(w), "-p", "fifo", "--no-lp-bound", "-j", "1"]
    result = invoke(*args, "--cluster", "a100:1x4,v100:1x4")
    assert result.exit_code == 0, result.output
    result = invoke(*args, "--cluster", "B200:1x8", "--gpu-speed", "b200=h100*2")
    assert result.exit_code == 0 and "B200:1x8" in result.output, result.output
    assert_one_line_error(invoke(*args, "--cluster", "b200:1x8", "--gpu-speed", "b200=x100*2"),
                          "b200=x100*2: base type 'x100' is unknown to built-in catalog")
    assert_one_line_error(invoke(*args, "--cluster", "b200:1x8", "--gpu-speed", "b200=h100*0"),
                          "the factor must be a number > 0")
    assert_one_line_error(invoke(*args, "--cluster", "b200:1x8"),
                          "has no step times for GPU type 'b200'")
