"""Test-wide settings: one BLAS thread (as the `corral` command uses), set before numpy loads."""

import os
import sys
import time

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# This folder on sys.path: test modules `import datafiles` (where the datasets are, issue 37).
sys.path.append(os.path.dirname(os.path.abspath(__file__)))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """xdist's --dist loadgroup: put the xdist_group name into each marked test's id, as xdist
    3.8 means to. It sets `item._nodeid`, which pytest 9 no longer reads (the id is `item._id`),
    so without this the groups are silently ignored and "serial" tests run beside each other."""
    if not (hasattr(config, "workerinput") and config.getoption("loadgroup", False)):
        return
    from _pytest.nodeid import coerce_node_id

    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")


class _Progress:
    """A line every 30 s or more of the run: tests finished of those collected, and how long
    the run has taken (dots alone say little while a long test runs on every worker). In the
    process that reports (the xdist controller, or pytest without xdist)."""

    EVERY_S = 30.0

    def __init__(self, reporter) -> None:
        self.reporter = reporter
        self.start = self.last = time.monotonic()
        self.done = 0
        self.total = 0  # under xdist: what a worker collected (each collects every test)

    def finished(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        self.done += 1
        now = time.monotonic()
        if now - self.last >= self.EVERY_S:
            self.last = now
            total = self.total or getattr(self.reporter, "_numcollected", 0) or "?"
            took = int(now - self.start)
            self.reporter.write("\n")  # after a row of dots, on a line of its own
            self.reporter.write_line(f"[progress] {self.done}/{total} tests after "
                                     f"{took // 60}m{took % 60:02d}s")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if hasattr(config, "workerinput") or reporter is None:
        return
    progress = _Progress(reporter)

    class _Hook:
        @staticmethod
        def pytest_runtest_logreport(report: pytest.TestReport) -> None:
            progress.finished(report)

        @staticmethod
        def pytest_xdist_node_collection_finished(node, ids) -> None:
            progress.total = len(ids)

    config.pluginmanager.register(_Hook(), "corral-progress")
