"""Gavel's `.trace` workloads and Gavel's throughput table as their truth (issue 35, item 2)."""

from __future__ import annotations

import csv
import json
from importlib import resources

import datafiles
import pytest
from typer.testing import CliRunner

from corral.core.errors import InputError
from corral.sim.truth.gavel import GavelTruth
from corral.sim.truth.scaled import job_app
from corral.sim.workloads import load_workload, load_workloads

TRACES = ("artifact_evaluation", "max_min_fairness", "medium_test", "minimize_makespan", "small_test")


def _tiny_table(path):
    """A throughput file in Gavel's layout (made-up figures): two models, two GPU types."""
    def entry(v):
        return {"null": v, "('other', 1)": [v / 2, 1.0]}
    data = {
        "k80": {str(("Net (batch size 32)", 1)): entry(2.0), str(("Net (batch size 32)", 2)): entry(3.0),
                str(("Net (batch size 32)", 4)): entry(0.0),  # not measured
                str(("Net (batch size 64)", 1)): entry(1.2), str(("Net (batch size 64)", 2)): entry(2.0),
                str(("Solo", 1)): entry(5.0)},
        "v100": {str(("Net (batch size 32)", 1)): entry(8.0), str(("Net (batch size 32)", 2)): entry(12.0),
                 str(("Net (batch size 32)", 4)): entry(20.0), str(("Net (batch size 64)", 1)): entry(5.0)},
        "v100_unconsolidated": {str(("Net (batch size 32)", 2)): entry(10.0)},
    }
    path.write_text(json.dumps(data))
    return path


def test_gavel_truth_answers_per_type_from_the_table(tmp_path):
    truth = GavelTruth(_tiny_table(tmp_path / "simulation_throughputs.json"))
    assert sorted(truth.apps()) == ["Net (batch size 32)", "Net (batch size 64)", "Solo"]
    assert truth.gpu_types("Net (batch size 32)") == ("k80", "v100")
    assert truth.gpu_types("Solo") == ("k80",)
    app = truth.app("Net (batch size 32)")
    assert app.gpu_type == "k80" and app.for_type("") is app
    v100 = app.for_type("v100")
    assert v100.step_time((1,), 32) == pytest.approx((1 / 8.0, 0.0))
    assert v100.step_time((2,), 32) == pytest.approx((2 / 12.0, 2 / 12.0 - 1 / 8.0))
    assert v100.step_time((1, 1), 32)[0] == pytest.approx(2 / 10.0)  # across nodes: unconsolidated
    assert v100.step_time((4,), 32)[0] == pytest.approx(4 / 20.0)
    assert v100.step_time((16,), 32)[0] == pytest.approx(4 / 20.0)  # per-GPU held past 8 measured
    # k80 on 4: not measured (0) -> per-GPU throughput of the largest measured count, 2
    assert app.step_time((4,), 32)[0] == pytest.approx(2 / 3.0)
    # between the model's batch sizes: over log2 batch; below the smallest: held
    mid = app.step_time((1,), 32 * 2 ** 0.5)[0]
    assert mid == pytest.approx((1 / 2.0 + 1 / 1.2) / 2)
    assert app.step_time((1,), 16)[0] == pytest.approx(1 / 2.0)
    assert app.step_time((1,), 128)[0] == pytest.approx(2 / 1.2)  # above: proportional
    assert app.gain(32 * 4, 0) == pytest.approx(4.0)  # progress in iterations at b
    with pytest.raises(InputError, match=r"'Solo' has no step times for GPU type 'v100'; known types: 'k80'"):
        truth.app("Solo").for_type("v100")


def _trace(path, lines):
    path.write_text("".join("\t".join(str(c) for c in line) + "\n" for line in lines))
    return path


def _line(job="Net (batch size 32)", steps=1000, gpus=2, arrival=0):
    return [job, "python3 x.py", "dir", "--steps", 1, steps, gpus, 1, -1.0, arrival]


def test_trace_loader_on_a_tiny_table(tmp_path):
    _tiny_table(tmp_path / "simulation_throughputs.json")
    trace = _trace(tmp_path / "t.trace", [_line(), _line("Solo", 50, 1, 30.5)])
    w = load_workload(trace, {})
    assert [j.app for j in w.jobs] == ["Net (batch size 32)", "Solo"]
    assert w.truth is not None and w.truth.gavel.endswith("simulation_throughputs.json")
    net = w.jobs[0]
    assert (net.gpus, net.batch_size, net.max_local_bsz, net.adaptive) == (2, 64, 32, False)
    assert net.trace_duration_s == pytest.approx(1000 / 3.0)
    assert w.jobs[1].submit_time_s == 30.5
    truth = w.truth.load()
    for per_node in (1, 2, 4):  # the work is total_steps however the nodes are cut
        assert job_app(truth, net, per_node).factor == pytest.approx(1000)


@pytest.mark.parametrize("line,match", [
    (_line()[:9], r"t.trace:2: expected 10 tab-separated fields"),
    (_line("Nope"), r"t.trace:2: job type 'Nope' has no single-GPU throughput"),
    (_line(steps="x"), r"t.trace:2: total_steps and scale_factor must be integers"),
    (_line(gpus=0), r"t.trace:2: need total_steps >= 1, scale_factor >= 1"),
])
def test_trace_errors_name_the_file_and_line(tmp_path, line, match):
    _tiny_table(tmp_path / "simulation_throughputs.json")
    with pytest.raises(InputError, match=match):
        load_workload(_trace(tmp_path / "t.trace", [_line(), line]), {})


def test_trace_without_a_table(tmp_path):
    (tmp_path / "a").mkdir()
    with pytest.raises(InputError, match=r"needs Gavel's simulation_throughputs.json, not found in"):
        load_workload(_trace(tmp_path / "a" / "t.trace", [_line()]), {})


# --- the shared traces -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def traces():
    datafiles.need("gavel-throughputs")
    return datafiles.need("gavel-traces")


def test_shared_traces_load(traces):
    workloads = load_workloads(traces, {})
    assert [w.name for w in workloads] == sorted(TRACES)
    for w in workloads:
        rows = [line.split("\t") for line in (traces / f"{w.name}.trace").read_text().splitlines() if line]
        assert len(w) == len(rows)
        truth = w.truth.load()
        for job in w.jobs:
            app = truth.app(job.app)
            assert set(app.gpu_types()) == {"k80", "p100", "v100"}
            assert job.gpus in (1, 2, 4, 8) and job.min_gpus == job.max_gpus == job.gpus
        by_name = {j.name: j for j in w.jobs}
        for i, row in enumerate(rows):  # duration = total_steps / the k80 throughput on one server
            job = by_name[f"{w.name}-{i}"]
            app = truth.app(row[0])
            assert job.trace_duration_s == pytest.approx(int(row[5]) / app.throughput(int(row[6])))
            assert job_app(truth, job, 4).factor == pytest.approx(int(row[5]))


def test_gavel_ratios_come_through(traces):
    truth = load_workload(traces / "small_test.trace", {}).truth.load()
    app = truth.app("ResNet-50 (batch size 64)")
    k80, v100 = app.for_type("k80").step_time((1,), 64)[0], app.for_type("v100").step_time((1,), 64)[0]
    assert round(k80 / v100, 1) == 7.1
    rec = truth.app("Recommendation (batch size 2048)")
    assert rec.for_type("v100").step_time((1,), 2048)[0] > rec.for_type("p100").step_time((1,), 2048)[0]


def test_simulate_runs_a_gavel_trace(traces, tmp_path):
    from corral.cli.main import app

    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["simulate", "-w", str(traces / "small_test.trace"), "-p", "fifo",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "Gavel throughputs" in res.output
    with (out / "jobs.csv").open() as fh:
        jobs = list(csv.DictReader(fh))
    assert len(jobs) == 20 and all(j["finish_s"] for j in jobs)
    # every job starts at once on the 64 GPUs and runs its total_steps at the k80 throughput
    # (the unnamed type of this cluster is the table's first type), after the same start pause
    spec = {j.name: j for j in load_workload(traces / "small_test.trace", {}).jobs}
    pauses = {round(float(j["jct_s"]) - spec[j["name"]].trace_duration_s, 6) for j in jobs}
    assert len(pauses) == 1 and 0 <= pauses.pop() <= 60
    catalog = tmp_path / "catalog.json"
    catalog.write_text(resources.files("corral.data").joinpath("catalog.json").read_text())
    res = CliRunner().invoke(app, ["simulate", "-w", str(traces / "small_test.trace"), "-p", "fifo",
                                   "--catalog", str(catalog)])
    assert res.exit_code != 0 and "runs on its own throughput table" in res.output
