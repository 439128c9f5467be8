"""Test-wide settings: one BLAS thread (as the `corral` command uses), set before numpy loads."""

import os
import sys

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
