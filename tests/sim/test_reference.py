"""The speed work changed no result: every non-timing summary figure of the shared 160-job
workloads equals, to the last digit, a stored run (first of the code before the speed work,
commit 9f38669; remade when issue 15's fidelity fixes changed figures on purpose: see
reference_run.py).

The stored run (`tests/sim/data/reference_summaries.json`, made by `reference_run.py`) covers
all seven policies on all eight workloads; this test checks the cells that run in a few seconds
each, and `python benchmarks/speed/bench_scale.py --check-reference` checks every cell. Both compute
with numpy's AVX2 kernels, as the stored run did (see reference_run.py: optimus-oracle's
decisions turn on numpy's last bits, which depend on the CPU).
"""

from __future__ import annotations

import pytest
from reference_run import REFERENCE_FILE, figures_in_subprocess, load_reference, missing_data

MISSING = missing_data()  # the skip reason names the `corral data fetch` command
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "data found")

#: (policy, workload) cells checked in CI: every cheap policy on two workloads, Optimus (the
#: oracle form, whose speed tables changed) on one, and Pollux (whose agents' fits, batch
#: choices and speedup tables were made cheaper, issue 18) on one (~30 s).
CI_CELLS = [(p, w) for p in ("fifo", "srtf", "tiresias-las", "tiresias-gittins")
            for w in ("workload-1", "workload-6")] + [("optimus-oracle", "workload-1"),
                                                      ("pollux", "workload-1")]


def test_reference_file_covers_the_whole_matrix():
    ref = load_reference()
    assert sorted(ref) == sorted(["fifo", "srtf", "tiresias-las", "tiresias-gittins", "optimus",
                                  "optimus-oracle", "pollux"])
    for policy, cells in ref.items():
        assert sorted(cells) == [f"workload-{i}" for i in range(1, 9)], policy
        for fig in cells.values():
            assert fig["finished"] == 160 and fig["unfinished"] == 0 and "wall_s" not in fig


@pytest.fixture(scope="module")
def current_figures() -> dict[tuple[str, str], dict]:
    """The CI cells computed by this code, with the stored run's numpy kernels (one process)."""
    return figures_in_subprocess(CI_CELLS)


# slow: the module fixture runs the cells (a minute); one xdist group, so it runs once, not on
# every worker that gets a cell.
@pytest.mark.slow
@pytest.mark.xdist_group("sim_reference")
@pytest.mark.parametrize("policy,workload", CI_CELLS)
def test_summary_figures_unchanged(policy, workload, current_figures):
    stored = load_reference()[policy][workload]
    now = current_figures[(policy, workload)]
    assert {k: now.get(k) for k in stored} == stored, f"{policy} on {workload} ({REFERENCE_FILE})"
