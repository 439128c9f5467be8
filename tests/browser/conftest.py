"""Headless Chromium driven by selenium, for the dashboard and report tests.

Needs Debian's `chromium` and `chromium-driver` packages (`.ci/run` installs them where apt
works) and selenium from PyPI (the `dev` extra); without any of them these tests skip, saying
which is missing. Screenshots go to the test's tmp_path and are copied to `out/screenshots/`
of the repository (git-ignored) for people to look at; each test prints where.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "out" / "screenshots"


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium, or the dev extra)"
    for names, package in ((("chromium", "chromium-browser", "google-chrome"), "chromium"),
                           (("chromedriver",), "chromium-driver")):
        if not any(shutil.which(n) for n in names):
            return (f"{names[0]} not found (apt-get install -y chromium chromium-driver: the "
                    f"browser and its driver; {package} is the one missing)")
    return None


class Browser:
    """A selenium Chrome driver plus screenshots and the console's errors."""

    def __init__(self, driver, shots: Path) -> None:
        self.driver = driver
        self.shots = shots

    def screenshot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SHOTS / path.name)
        print(f"screenshot: {path} (copied to {SHOTS / path.name})")
        return path

    def console_errors(self) -> list[dict]:
        return [e for e in self.driver.get_log("browser") if e.get("level") == "SEVERE"]


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    reason = _missing()
    if reason:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    binary = next(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                  if shutil.which(n))
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--no-first-run", "--disable-extensions",
                "--disable-background-networking"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    except WebDriverException as exc:
        pytest.skip(f"headless Chromium did not start: {str(exc).splitlines()[0]}")
    driver.set_page_load_timeout(30)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    try:
        yield Browser(driver, shots)
    finally:
        driver.quit()
