"""Following work from the terminal against a real `corral serve`: `corral jobs --watch` and
`corral logs JOB --follow` (each returns when the job ends) and `corral describe JOB`."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))
import livecluster as live  # noqa: E402

pytestmark = [pytest.mark.slow]

TINY_JOB = Path(__file__).resolve().parents[1] / "train" / "tiny_job.py"


@pytest.fixture
def service(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("torch")
    (tmp_path / "data").mkdir()
    svc = live.LiveService(tmp_path / "data", policy="fifo", slots=1, interval_s=1.0)
    try:
        yield svc.start()
    finally:
        svc.close()


def test_watch_follow_describe(service, tmp_path):
    work = tmp_path / "work"  # beside the data directory: a job is not run from above it
    work.mkdir()
    hold = work / "release"
    job_id = service.client.submit({
        "command": [sys.executable, str(TINY_JOB), "--epochs", "5", "--hold-at-step", "20",
                    "--hold-file", str(hold)], "cwd": str(work), "name": "tiny"})["id"]
    live.wait_until(lambda: service.job(job_id)["steps"] >= 1, 60, f"{job_id} to report")

    watch = subprocess.Popen([*live.CLI, "jobs", "--watch", "--every", "0.5"], env=service.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    follow = subprocess.Popen([*live.CLI, "logs", job_id, "--follow", "--every", "0.3"],
                              env=service.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    drawn: list[str] = []  # the watch's output as it comes (read on a thread: no deadlock)
    reader = threading.Thread(target=lambda: drawn.extend(iter(watch.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        # the job is held at step 20 until the watch has drawn it running (a starved machine
        # may take seconds to start the watch), then released to finish
        live.wait_until(lambda: "running" in "".join(drawn), 90, "the watch to show it running")
        hold.touch()
        out, err = follow.communicate(timeout=90)  # returns by itself once the job ended
        assert follow.returncode == 0, err
        assert service.job(job_id)["status"] == "done"
        assert out == service.client.logs(job_id)  # nothing lost, nothing twice
        assert watch.wait(timeout=30) == 0, watch.stderr.read()  # ends by itself: all ended
        reader.join(timeout=10)
        assert "done" in "".join(drawn)  # redrawn as the job went on
    finally:
        for proc in (watch, follow):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)

    done = service.cli("describe", job_id)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    for part in ("spec", "events", "launches", "assignments", "checkpoints:", "last report:",
                 "submitted", "started", "tiny_job.py",
                 f'step {service.job(job_id)["steps"]},'):
        assert part in text, part
    missing = service.cli("describe", "job-99")
    assert missing.returncode == 2 and "no job 'job-99'" in missing.stderr
