"""corral.report: tables, summary.json / jobs.csv and PNG plots."""

import csv
import io
import json

import pytest
from rich.console import Console

from corral.report import (
    JOBS_CSV_COLUMNS,
    comparison_table,
    per_workload_table,
    plot_gpu_usage,
    plot_jct_cdf,
    write_outputs,
)
from corral.sim.analysis.metrics import SUMMARY_FIELDS, mean_summary, summarize
from corral.sim.loop.results import JobRecord, SimResult

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _job(name, submit, start, finish, restarts=0, isolated=None, fair=None):
    return JobRecord(name=name, app="bert", submit_s=submit, requested_gpus=2,
                     first_start_s=start, finish_s=finish, restarts=restarts,
                     isolated_jct_s=isolated, fair_share_jct_s=fair, attained_gpu_s=42.0)


def _result(policy, workload, scale=1.0, unfinished=True):
    """JCTs 110, 200, 400, 100 (x scale); avg 202.5*scale; optionally one unfinished job."""
    jobs = [
        _job("A", 0, 10, 110 * scale, 0, 50, 100),
        _job("B", 20, 20, 20 + 200 * scale, 2, 100, 100),
        _job("C", 50, 100, 50 + 400 * scale, 1, 200, 400),
        _job("D", 60, 70, 60 + 100 * scale, 0, 50, 200),
    ]
    if unfinished:
        jobs.append(_job("E", 300, None, None))
    timeline = [(0.0, 0), (10.0, 2), (20.0, 6), (100.0, 8), (220.0, 4), (450.0 * scale, 0)]
    return SimResult(policy=policy, workload=workload, cluster_gpus=8, jobs=jobs,
                     gpu_timeline=timeline, wall_s=2.25)


def _render(table) -> str:
    console = Console(file=io.StringIO(), width=250, color_system=None)
    console.print(table)
    return console.file.getvalue()


@pytest.fixture
def results():
    return {
        "pollux": [_result("pollux", "w0"), _result("pollux", "w1", scale=2.0)],
        "tiresias": [_result("tiresias", "w0", scale=3.0, unfinished=False)],
    }


# ---- tables ---------------------------------------------------------------------------------

def test_comparison_table_columns_and_values(results):
    s = summarize(results["pollux"][0])
    rows = [("pollux", "w0", s), ("pollux", "mean", mean_summary([s]))]
    table = comparison_table(rows)
    headers = [c.header for c in table.columns]
    assert headers == ["policy", "workload", "avg JCT", "p50", "p99", "makespan", "queue",
                       "FTF p99", "FTF max", "restarts/job", "GPU util", "LB ratio", "LP bound",
                       "gap", "wall"]
    assert table.row_count == 2
    text = _render(table)
    assert "155 s" in text  # p50
    assert "394 s" in text  # p99
    assert "450 s" in text  # makespan
    assert "1.97" in text  # ftf p99 1.973
    assert "0.75" in text  # restarts/job
    assert "66.1%" in text  # 2380/3600
    assert "2.3 s" in text or "2.2 s" in text  # wall 2.25
    assert "mean" in text


def test_comparison_table_missing_values_dash():
    d = {name: None for name in SUMMARY_FIELDS}
    text = _render(comparison_table([("x", "w", d)]))
    line = next(ln for ln in text.splitlines() if ln.startswith("│ x "))
    cells = [c.strip() for c in line.split("│")[1:-1]]
    assert cells == ["x", "w"] + ["-"] * 13


def test_per_workload_table(results):
    by_policy = {p: {r.workload: summarize(r) for r in runs} for p, runs in results.items()}
    table = per_workload_table(by_policy, reference={"w0": 1000.0, "w1": 3000.0})
    assert [c.header for c in table.columns] == ["workload", "pollux", "tiresias", "reference"]
    assert table.row_count == 3  # w0, w1, mean
    text = _render(table)
    lines = text.splitlines()
    w1 = next(ln for ln in lines if "w1" in ln)
    assert "405 s" in w1 and "-" in w1 and "3000 s" in w1  # tiresias has no w1
    mean = next(ln for ln in lines if "mean" in ln)
    # pollux mean of 202.5 and 405 = 303.75; tiresias 607.5 (scale 3); reference mean 2000
    assert "304 s" in mean and "608 s" in mean and "2000 s" in mean
    # explicit reference mean wins
    text2 = _render(per_workload_table(by_policy, reference={"w0": 1.0, "mean": 1234.0}))
    assert "1234 s" in next(ln for ln in text2.splitlines() if "mean" in ln)


# ---- files ----------------------------------------------------------------------------------

def test_write_outputs(tmp_path, results):
    out = tmp_path / "run"
    written = write_outputs(out, results)
    assert set(written) == {"summary", "jobs", "gpu_timeline", "allocations", "jct_cdf",
                            "gpu_usage", "report"}

    doc = json.loads((out / "summary.json").read_text())
    assert doc["schema"] == 1
    assert set(doc["policies"]) == {"pollux", "tiresias"}
    pol = doc["policies"]["pollux"]
    assert set(pol) == {"mean", "workloads"}
    assert list(pol["workloads"]) == ["w0", "w1"]
    for obj in [pol["mean"], *pol["workloads"].values(),
                doc["policies"]["tiresias"]["mean"]]:
        assert list(obj) == list(SUMMARY_FIELDS)
    assert pol["workloads"]["w0"]["avg_jct_s"] == pytest.approx(202.5)
    assert pol["workloads"]["w1"]["avg_jct_s"] == pytest.approx(405.0)
    assert pol["mean"]["avg_jct_s"] == pytest.approx(303.75)
    assert pol["workloads"]["w0"]["unfinished"] == 1
    assert doc["policies"]["tiresias"]["workloads"]["w0"]["unfinished"] == 0

    with (out / "jobs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == JOBS_CSV_COLUMNS
    assert len(rows) == 5 + 5 + 4
    a = next(r for r in rows if r["policy"] == "pollux" and r["workload"] == "w0"
             and r["name"] == "A")
    assert float(a["jct_s"]) == pytest.approx(110.0)
    assert float(a["ftf"]) == pytest.approx(1.1)
    assert float(a["isolated_jct_s"]) == 50.0 and a["requested_gpus"] == "2"
    e = next(r for r in rows if r["policy"] == "pollux" and r["name"] == "E")
    assert e["finish_s"] == "" and e["jct_s"] == "" and e["ftf"] == "" and e["first_start_s"] == ""

    for name in ("jct_cdf.png", "gpu_usage.png"):
        data = (out / name).read_bytes()
        assert len(data) > 1000 and data[:8] == PNG_MAGIC


def test_write_outputs_uses_given_summaries_and_no_plots(tmp_path, results):
    s = summarize(results["pollux"][0])
    fake = type(s)(**{**s.to_dict(), "avg_jct_s": 1.0})
    write_outputs(tmp_path, results, {"pollux": {"w0": fake}}, plots=False)
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["policies"]["pollux"]["workloads"]["w0"]["avg_jct_s"] == 1.0
    assert doc["policies"]["pollux"]["workloads"]["w1"]["avg_jct_s"] == pytest.approx(405.0)
    assert not (tmp_path / "jct_cdf.png").exists()
    with pytest.raises(ValueError):
        write_outputs(tmp_path, results, {"pollux": [s]}, plots=False)


def test_write_outputs_all_unfinished_is_valid_json(tmp_path):
    r = SimResult(policy="p", workload="w", cluster_gpus=4, jobs=[_job("X", 0, None, None)])
    write_outputs(tmp_path, {"p": [r]})
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["policies"]["p"]["workloads"]["w"]["avg_jct_s"] is None
    assert doc["policies"]["p"]["mean"]["avg_jct_s"] is None
    assert (tmp_path / "jct_cdf.png").read_bytes()[:8] == PNG_MAGIC


def test_duplicate_workload_names_get_suffix(tmp_path):
    results = {"p": [_result("p", "w"), _result("p", "w", scale=2.0)]}
    write_outputs(tmp_path, results, plots=False)
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert list(doc["policies"]["p"]["workloads"]) == ["w", "w#2"]


# ---- plots ----------------------------------------------------------------------------------

def test_plots_each_workload(tmp_path, results):
    p1 = plot_jct_cdf(results, tmp_path / "sub" / "cdf.png")
    p2 = plot_gpu_usage(results, tmp_path / "gpu_each.png", cluster_gpus=8, each=True)
    p3 = plot_gpu_usage(results, tmp_path / "gpu_first.png")
    for p in (p1, p2, p3):
        data = p.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 1000
    # two panels are taller than one
    from matplotlib.image import imread
    assert imread(p2).shape[0] > imread(p3).shape[0]
