"""report.html, the files it is rebuilt from, `corral report DIR`, and the findings in words."""

import base64
import re
import shutil
import subprocess
import sys

import pytest
from checkout_env import checkout_env

from corral.core.errors import InputError
from corral.report import write_outputs
from corral.report.findings import findings
from corral.report.html import write_html_report
from corral.report.readback import read_outputs
from corral.sim.analysis.metrics import job_ftf
from corral.sim.loop.results import JobRecord, SimResult

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(policy, workload, scale):
    jobs = [JobRecord(name=n, app="bert", submit_s=s, requested_gpus=2, first_start_s=s + 5,
                      finish_s=s + d * scale, restarts=1, attained_gpu_s=d * scale * 2,
                      isolated_jct_s=d / 2, fair_share_jct_s=d)
            for n, s, d in (("a", 0.0, 100.0), ("b", 10.0, 300.0), ("c", 50.0, 200.0))]
    allocations = {"a": [(0.0, 2)], "b": [(10.0, 4), (60.0, 2)], "c": [(60.0, 2)]}
    timeline = [(0.0, 0), (0.0, 2), (10.0, 6), (60.0, 6), (400.0, 0)]
    return SimResult(policy=policy, workload=workload, cluster_gpus=8, jobs=jobs,
                     gpu_timeline=timeline, allocations=allocations, wall_s=0.5)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One folder of outputs for the module (writing its plots is what costs)."""
    out = tmp_path_factory.mktemp("outputs")
    results = {"fifo": [_run("fifo", "w0", 3.0), _run("fifo", "w1", 2.0)],
               "pollux": [_run("pollux", "w0", 1.0), _run("pollux", "w1", 1.5)]}
    write_outputs(out, results)
    return out, results


@pytest.fixture
def folder(written, tmp_path):
    """A copy of the module's outputs, the test's own to change."""
    out, results = written
    shutil.copytree(out, tmp_path / "out")
    return tmp_path / "out", results


def test_readback_gives_the_runs_back(folder):
    out, results = folder
    back = read_outputs(out)
    assert back.has_timelines and back.has_allocations
    assert list(back.results) == ["fifo", "pollux"]
    for policy, runs in results.items():
        for orig, got in zip(runs, back.results[policy]):
            assert got.workload == orig.workload and got.cluster_gpus == 8
            assert got.gpu_timeline == orig.gpu_timeline
            assert got.allocations == orig.allocations
            assert [j.name for j in got.jobs] == [j.name for j in orig.jobs]
            for a, b in zip(orig.jobs, got.jobs):
                assert (b.submit_s, b.finish_s, b.restarts) == (a.submit_s, a.finish_s, a.restarts)
                assert job_ftf(b) == pytest.approx(job_ftf(a))


def test_report_is_self_contained_with_every_part(folder):
    out, _ = folder
    page = (out / "report.html").read_text()
    assert "<script" not in page and "http://" not in page and "https://" not in page
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 4  # JCT CDF, GPUs in use, queueing + fairness, allocation timeline
    assert all(base64.b64decode(i)[:8] == PNG_MAGIC for i in images)
    for part in ('id="comparison"', 'id="workload-0"', 'id="workload-1"', "Allocation timeline",
                 "Queueing and fairness", "GPUs in use over time", "What it shows"):
        assert part in page
    comparison = page.split('id="comparison"')[1].split("</table>")[0]
    assert "<td>fifo</td>" in comparison and "<td>pollux</td>" in comparison
    best = re.search(r'<tr class="best"><td>([^<]+)</td>', comparison).group(1)
    assert best == "pollux"


def test_corral_report_rebuilds_from_summary_and_jobs_alone(folder):
    out, _ = folder
    first = (out / "report.html").read_text()
    for name in ("report.html", "gpu_timeline.csv", "allocations.csv", "jct_cdf.png"):
        (out / name).unlink()
    done = subprocess.run([sys.executable, "-c", "from corral.cli.main import app; app()",
                           "report", str(out)], capture_output=True, text=True, timeout=120, env=checkout_env())
    assert done.returncode == 0, done.stderr
    page = (out / "report.html").read_text()
    assert "gpu_timeline.csv is not in this folder" in page
    assert "allocations.csv is not in this folder" in page
    assert page.split('id="comparison"')[1].split("</table>")[0] == \
        first.split('id="comparison"')[1].split("</table>")[0]


def test_report_of_a_folder_without_results_is_one_line(tmp_path):
    with pytest.raises(InputError, match="summary.json"):
        write_html_report(tmp_path)
    done = subprocess.run([sys.executable, "-c", "from corral.cli.main import app; app()",
                           "report", str(tmp_path)], capture_output=True, text=True, timeout=120, env=checkout_env())
    assert done.returncode == 2 and "summary.json" in done.stderr
    assert "Traceback" not in done.stderr


def _doc(**avg):
    return {"schema": 1, "policies": {p: {"mean": {"avg_jct_s": v, "p99_jct_s": v * 3,
                                                   "avg_queue_s": v / 10, "ftf_max": v / 100,
                                                   "makespan_s": v * 5, "gpu_util": 0.5}}
                                      for p, v in avg.items()}}


def test_findings_name_the_winner_against_fifo():
    lines = findings(_doc(fifo=3000.0, **{"tiresias-las": 2000.0}, pollux=1000.0))
    assert lines[0].startswith("pollux has the shortest average JCT: 1,000 s, 3.0x shorter "
                               "than fifo (3,000 s)")
    assert any(line.startswith("tiresias-las: 2,000 s, 1.50x fifo's") for line in lines)
    assert any("srtf" not in line and "shortest tail" in line for line in lines)


def test_findings_say_when_policies_barely_differ():
    lines = findings(_doc(fifo=1000.0, pollux=990.0))
    assert len(lines) == 1 and "barely differ" in lines[0] and "50%" in lines[0]


def test_findings_call_a_tie_a_tie():
    doc = _doc(fifo=3000.0, **{"tiresias-las": 2000.0}, pollux=1000.0)
    for policy in ("fifo", "pollux"):  # equal as printed: 5.00 and 5.00
        doc["policies"][policy]["mean"]["ftf_max"] = 5.0
    doc["policies"]["tiresias-las"]["mean"]["ftf_max"] = 7.0
    lines = findings(doc)
    assert "fifo and pollux tie for the fairest worst case (largest finish-time fairness rho; " \
           "1 = a fair 1/N share): 5.00." in lines
    assert not any("has the fairest" in line for line in lines)
    doc["policies"]["tiresias-las"]["mean"]["ftf_max"] = 5.001
    assert any(line.startswith("Every policy ties for the fairest") for line in findings(doc))


def test_findings_mark_the_oracles_they_are_told_of():
    """Report imports no policy: which ones are oracles is the caller's to say (the registry's
    `oracles()`), and only those are marked."""
    doc = _doc(fifo=3000.0, srtf=1000.0)
    assert "srtf (oracle) has the shortest" in findings(doc, {"srtf"})[0]
    assert findings(doc)[0].startswith("srtf has the shortest")
