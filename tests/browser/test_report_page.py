"""report.html in a real browser: every policy in the comparison, every figure decoded."""

from __future__ import annotations

import pytest

from corral.cli.main import DEFAULT_POLICIES
from corral.core.cluster import Cluster
from corral.report import write_outputs
from corral.sim.batch.sweep import parse_settings, run_matrix
from corral.sim.loop.config import EngineConfig
from corral.sim.truth.source import TruthSource
from corral.sim.workloads import synthetic

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serial")]


def test_report_renders_every_policy(browser, tmp_path):
    from selenium.webdriver.common.by import By

    source = TruthSource.of(None, None)
    workload = synthetic(source.load().limits(), num_jobs=16, rate_per_hour=30, seed=1,
                         mix={"cifar10": 0.5, "ncf": 0.3, "bert": 0.2}, name="small")
    matrix = run_matrix(source, parse_settings(DEFAULT_POLICIES, []), [workload],
                        Cluster.parse("4x4"), EngineConfig())
    assert not matrix.failures
    out = tmp_path / "run"
    write_outputs(out, matrix.results)

    d = browser.driver
    d.get((out / "report.html").as_uri())
    rows = d.find_elements(By.CSS_SELECTOR, "#comparison tbody tr")
    assert [r.find_element(By.TAG_NAME, "td").text for r in rows] == DEFAULT_POLICIES
    assert len(d.find_elements(By.CSS_SELECTOR, "#workload-0 tbody tr")) == len(DEFAULT_POLICIES)
    images = d.find_elements(By.TAG_NAME, "img")
    assert len(images) == 4
    for img in images:  # decoded and laid out, not a broken-image icon
        assert d.execute_script("return arguments[0].complete && arguments[0].naturalWidth",
                                img) > 300, img.get_attribute("alt")
    browser.screenshot("report-top")
    d.execute_script("document.querySelector('h2:last-of-type').scrollIntoView()")
    browser.screenshot("report-allocation-timeline")
    d.set_window_size(1400, d.execute_script("return document.body.scrollHeight") + 100)
    browser.screenshot("report-full")
    assert browser.console_errors() == []
