"""`corral emulate`: the real service on simulated jobs agrees with `corral simulate` (issue 13
item 5, the CI-sized check; benchmarks/live/bench_emulate.py runs the whole of workload-6)."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys

import datafiles
import pytest

from corral.cli.emulate_cmd import submission_body
from corral.core.jobs import JobSpec, LrRule
from corral.report.files import JOBS_CSV_COLUMNS
from corral.service.submission import Submission

CLI = [sys.executable, "-m", "corral"]


@pytest.mark.slow
def test_emulated_fifo_agrees_with_the_simulator_on_the_first_jobs_of_workload_6(tmp_path) -> None:
    profiles, workloads = datafiles.need("pollux-profiles"), datafiles.need("pollux-workloads")
    out = tmp_path / "out"
    done = subprocess.run(
        [*CLI, "emulate", "--workload", str(workloads / "workload-6.csv"),
         "--profiles", str(profiles), "--policy", "fifo", "--cluster", "16x4",
         "--time-scale", "5000", "--limit", "12", "--compare", "--timeout", "120",
         "--out", str(out)],
        capture_output=True, text=True, timeout=240,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "avg JCT" in done.stdout and "fifo" in done.stdout
    [a] = json.loads((out / "agreement.json").read_text())
    assert a["jobs"] == 12
    assert abs(a["avg_jct_rel_diff"]) < 0.05, a
    assert a["median_job_abs_rel_diff"] < 0.05, a
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policies"]["fifo"]["mean"]["finished"] == 12
    with open(out / "jobs.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == JOBS_CSV_COLUMNS and len(rows) == 13


def test_a_workload_job_reaches_the_service_as_the_same_spec() -> None:
    """Every JobSpec field that changes how a job trains travels in its submission (a missing
    one-GPU split made the emulated ncf jobs train unlike the simulated ones): a spec whose
    every field differs from its default comes back whole, but for its id and submit time."""
    spec = JobSpec("ncf-7", 12.0, "ncf", gpus=2, batch_size=640, init_bsz=512, max_bsz=4096,
                   min_local_bsz=16, max_local_bsz=256, min_gpus=2, max_gpus=8, adaptive=False,
                   lr_rule=LrRule.SQRT, epochs=9, trace_duration_s=3600.0,
                   one_gpu_split_bsz=512, gpu_type="v100")
    for f in dataclasses.fields(JobSpec):
        # a job's queue is not the submission's to carry here: `corral emulate` runs the
        # service without queues, which refuses a named one (the token picks it live)
        if f.default is not dataclasses.MISSING and f.name != "queue":
            assert getattr(spec, f.name) != f.default, f"set {f.name} in this test"
    sub = Submission.model_validate(submission_body(spec, 64)).checked(64)
    assert sub.spec("job-3", 99.0) == dataclasses.replace(spec, name="job-3", submit_time_s=99.0)


def test_emulate_refuses_bad_arguments_in_one_line() -> None:
    done = subprocess.run([*CLI, "emulate", "--time-scale", "0"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--time-scale" in done.stderr
    done = subprocess.run([*CLI, "serve", "--time-scale", "5"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "need(s) --executor emulated" in done.stderr


def _run_with_jcts(*jcts: float):
    from corral.sim.loop.results import JobRecord, SimResult
    jobs = [JobRecord(f"j{i}", "cifar10", 0.0, 1, first_start_s=0.0, finish_s=jct)
            for i, jct in enumerate(jcts)]
    return SimResult("pollux", "w", 8, jobs)


def test_agreement_judges_the_emulated_run_against_the_band_of_reference_simulations() -> None:
    from corral.cli.emulate_cmd import agreement, agreement_lines
    simulated = _run_with_jcts(100.0, 300.0)  # 200 s
    band = [_run_with_jcts(150.0, 350.0), _run_with_jcts(80.0, 260.0)]  # 250 s, 170 s
    inside = agreement(_run_with_jcts(90.0, 270.0), simulated, band)  # 180 s: -10 % off 200 s
    assert inside["band_s"] == [170.0, 250.0] and inside["band_runs"] == 3
    assert inside["avg_jct_rel_diff"] == pytest.approx(-0.10)
    assert inside["band_rel_diff"] == 0.0 and inside["agrees"]
    below = agreement(_run_with_jcts(60.0, 240.0), simulated, band)  # 150 s: 11.8 % below 170
    assert below["band_rel_diff"] == pytest.approx(150 / 170 - 1) and not below["agrees"]
    above = agreement(_run_with_jcts(150.0, 360.0), simulated, band)  # 255 s: 2 % above 250
    assert above["band_rel_diff"] == pytest.approx(0.02) and above["agrees"]
    [line] = agreement_lines([below])
    assert "give 170-250 s" in line and "NOT within 5 %" in line
    alone = agreement(_run_with_jcts(90.0, 270.0), simulated)  # no band: the plain difference
    assert "band_s" not in alone and not alone["agrees"]
