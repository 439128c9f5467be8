"""The dashboard of a real `corral serve` in headless Chromium: the token asked once, a running
job's GPUs on the cluster view within seconds of its start, its page, its final status, and
no errors in the browser console.

The job is tests/train/tiny_job.py held after step 30 until the test creates a file, so the
test decides when it finishes (no race with the screenshots); every wait is bounded.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))
import livecluster as live  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serial")]

TINY_JOB = Path(__file__).resolve().parents[1] / "train" / "tiny_job.py"
SHOWN_WITHIN_S = 5.0  # the dashboard polls every second


@pytest.fixture
def service(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("torch")
    svc = live.LiveService(tmp_path / "data", policy="fifo", slots=2, interval_s=1.0)
    (tmp_path / "data").mkdir()
    try:
        yield svc.start()
    finally:
        svc.close()


def _wait(driver, what, timeout_s, condition):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout_s, poll_frequency=0.1).until(
        condition, message=f"timed out after {timeout_s} s waiting for {what}")


def _count(d, selector: str) -> int:
    """Elements matching `selector` now (read in the page: the dashboard redraws every second,
    so element references go stale)."""
    return d.execute_script("return document.querySelectorAll(arguments[0]).length", selector)


def _text(d, selector: str) -> str | None:
    return d.execute_script("const e = document.querySelector(arguments[0]);"
                            "return e ? e.textContent : null", selector)


def _click(d, selector: str) -> None:
    d.execute_script("document.querySelector(arguments[0]).click()", selector)


def test_dashboard_follows_a_job(browser, service, tmp_path):
    from selenium.webdriver.common.by import By

    d = browser.driver
    d.get(service.client.url + "/")
    token_input = _wait(d, "the token form", 10,
                        lambda d: d.find_element(By.ID, "token-input").is_displayed()
                        and d.find_element(By.ID, "token-input"))
    browser.screenshot("dashboard-token")
    token_input.send_keys((service.data_dir / "token").read_text().strip())
    d.find_element(By.ID, "token-save").click()
    _wait(d, "the cluster view", 10, lambda d: _count(d, "#cluster .gpu.idle") == 2)
    assert _text(d, "#policy") == "fifo"

    work = tmp_path / "work"  # beside the data directory: a job is not run from above it
    work.mkdir()
    hold = work / "release"
    job_id = service.client.submit({
        "command": [sys.executable, str(TINY_JOB), "--epochs", "60", "--hold-at-step", "30",
                    "--hold-file", str(hold)],
        "cwd": str(work), "gpus": 2, "min_gpus": 2, "name": "tiny"})["id"]
    live.wait_until(lambda: service.job(job_id)["status"] == "running", 60,
                    f"{job_id} to start")
    started = time.monotonic()
    _wait(d, f"{job_id} on 2 GPUs of the cluster view", SHOWN_WITHIN_S,
          lambda d: _count(d, f'#cluster .gpu[data-job="{job_id}"]') == 2)
    shown_after_s = time.monotonic() - started
    status = f'#jobs-table tr[data-job="{job_id}"] td.status'
    _wait(d, "the running status in the table", 2, lambda d: _text(d, status) == "running")
    print(f"{job_id} shown on the cluster view {shown_after_s:.1f} s after the API said running")
    live.wait_until(lambda: service.job(job_id)["steps"] >= 1, 60, f"{job_id} to report steps")
    _wait(d, "its steps in the table", SHOWN_WITHIN_S,
          lambda d: "(0 steps" not in (_text(d, f'#jobs-table tr[data-job="{job_id}"]') or
                                       "(0 steps"))
    browser.screenshot("dashboard-cluster-running")

    _click(d, f'#jobs-table tr[data-job="{job_id}"] a')
    _wait(d, "the job page", SHOWN_WITHIN_S,
          lambda d: d.find_element(By.ID, "job-page").is_displayed()
          and _text(d, "#job-status") == "running")
    _wait(d, "the job's events", SHOWN_WITHIN_S, lambda d: _count(d, "#events tr.event-submitted"))
    hold.touch()
    live.wait_until(lambda: service.job(job_id)["status"] in ("done", "failed"), 90,
                    f"{job_id} to finish")
    assert service.job(job_id)["status"] == "done", service.client.logs(job_id)[-2000:]
    _wait(d, "the final status on the job page", SHOWN_WITHIN_S,
          lambda d: _text(d, "#job-status") == "done")
    _wait(d, "the loss curve", SHOWN_WITHIN_S, lambda d: _count(d, "#loss-chart svg path"))
    assert _count(d, "#alloc-chart svg path") and _count(d, "#launches tbody tr")
    browser.screenshot("dashboard-job-page")

    _click(d, '#job-page a[href="#/"]')
    _wait(d, "the job's final status in the table", SHOWN_WITHIN_S,
          lambda d: _text(d, status) == "done")
    _wait(d, "the GPUs freed", SHOWN_WITHIN_S, lambda d: _count(d, "#cluster .gpu.idle") == 2)
    browser.screenshot("dashboard-cluster-done")

    d.get(service.client.url + "/docs")
    _wait(d, "the API page", 10, lambda d: _count(d, "#endpoints .endpoint") >= 8)
    browser.screenshot("api-page")
    assert browser.console_errors() == []
