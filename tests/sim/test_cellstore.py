"""A sweep keeps each finished cell on disk and a resumed sweep takes them: exactly the results a
new run gives, only for the same inputs and code, and never a cell that failed or was damaged."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from sweepkit import SOURCE, figures, small_workloads  # noqa: E402 (tests/sim is on sys.path)

from corral.core import Cluster
from corral.sim.batch.cellstore import (
    CellStore,
    cell_key,
    result_doc,
    result_from_doc,
    workload_digest,
)
from corral.sim.batch.runners import SerialRunner
from corral.sim.batch.sweep import PolicyChoice, run_matrix
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.results import JobRecord, SimResult

CLUSTER = Cluster.parse("4x4")
CONFIG = EngineConfig()


def _workloads():
    return small_workloads((10, 20, 1), (8, 30, 3))


class CountingRunner(SerialRunner):
    """Runs in this process and counts the simulations it was given."""

    def __init__(self) -> None:
        self.cells = 0

    def run(self, tasks):
        self.cells += sum(fn.__name__ == "run_cell" for fn, _ in tasks)
        return super().run(tasks)


def test_a_result_reads_back_exactly() -> None:
    result = SimResult("fifo", "w", 16, [
        JobRecord("a", "bert", 0.1, 2, 1 / 3, 2 / 3, 1, 0.7, 0.35, 0.0, 1, 123.456789, None),
        JobRecord("b", "imagenet", 5.0, 4)], gpu_timeline=[(0.0, 0), (1 / 3, 2)], wall_s=1.5,
        rounds=7, stopped="stopped at the horizon", allocations={"a": [(1 / 3, 2), (2 / 3, 0)]},
        lp_bound_avg_jct_s=math.inf)
    import json
    again = result_from_doc(json.loads(json.dumps(result_doc(result))))
    assert again == result


def test_a_resumed_sweep_takes_the_kept_cells_and_runs_the_others(tmp_path: Path) -> None:
    store = CellStore(tmp_path / "cells")
    choices = [PolicyChoice("fifo", {}), PolicyChoice("tiresias-las", {})]
    first = run_matrix(SOURCE, choices[:1], _workloads(), CLUSTER, CONFIG, SerialRunner(),
                       store=store)
    assert len(list(store.root.glob("*.json"))) == 2  # each cell kept as it finished
    runner, seen = CountingRunner(), []
    both = run_matrix(SOURCE, choices, _workloads(), CLUSTER, CONFIG, runner, store=store,
                      reuse=True, on_cell_done=lambda *a: seen.append(a))
    assert runner.cells == 2 and both.reused == 2  # only tiresias-las's two cells ran
    assert [s[0] for s in seen] == [1, 2, 3, 4] and all(s[1] == 4 for s in seen)
    fresh = run_matrix(SOURCE, choices, _workloads(), CLUSTER, CONFIG, SerialRunner())
    assert figures(both) == figures(fresh)
    assert figures(first)["fifo"] == figures(fresh)["fifo"]
    assert len(list(store.root.glob("*.json"))) == 4


def test_without_reuse_every_cell_runs_again(tmp_path: Path) -> None:
    store = CellStore(tmp_path)
    run_matrix(SOURCE, [PolicyChoice("fifo", {})], _workloads(), CLUSTER, CONFIG, store=store)
    runner = CountingRunner()
    run_matrix(SOURCE, [PolicyChoice("fifo", {})], _workloads(), CLUSTER, CONFIG, runner,
               store=store)
    assert runner.cells == 2


@pytest.mark.parametrize("change", ["cluster", "setting", "engine", "workload"])
def test_a_kept_cell_is_taken_only_for_the_same_inputs(change: str) -> None:
    w = _workloads()[0]
    base = dict(source=SOURCE, policy="fifo", overrides={}, workload=workload_digest(w),
                cluster=CLUSTER, config=CONFIG)
    other = {"cluster": {"cluster": Cluster.parse("2x8")},
             "setting": {"policy": "fifo", "overrides": {"backfill": "true"}},
             "engine": {"config": EngineConfig(interval_s=30.0)},
             "workload": {"workload": workload_digest(dataclasses.replace(
                 w, jobs=[dataclasses.replace(w.jobs[0], gpus=w.jobs[0].gpus + 1)] + w.jobs[1:]))},
             }[change]
    assert cell_key(**base) == cell_key(**base)
    assert cell_key(**{**base, **other}) != cell_key(**base)


def test_a_failed_or_damaged_cell_is_run_again(tmp_path: Path) -> None:
    store = CellStore(tmp_path)
    bad = PolicyChoice("fifo", {"no_such_parameter": "1"})
    choices = [PolicyChoice("srtf", {}), bad]
    matrix = run_matrix(SOURCE, choices, _workloads()[:1], CLUSTER, CONFIG, store=store)
    assert len(matrix.failures) == 1
    (kept,) = tmp_path.glob("*.json")  # the failure is not kept
    kept.write_text(kept.read_text()[:100])  # a write cut short by a crash
    runner = CountingRunner()
    again = run_matrix(SOURCE, choices, _workloads()[:1], CLUSTER, CONFIG, runner, store=store,
                       reuse=True)
    assert runner.cells == 2 and again.reused == 0 and len(again.failures) == 1
    assert "srtf" in again.results


def test_a_complete_run_keeps_only_its_own_cells(tmp_path: Path) -> None:
    store = CellStore(tmp_path)
    choices = [PolicyChoice("fifo", {}), PolicyChoice("srtf", {})]
    run_matrix(SOURCE, choices, _workloads(), CLUSTER, CONFIG, store=store)
    assert len(list(tmp_path.glob("*.json"))) == 4
    (tmp_path / "0123abcd.tmp999").write_text("{")  # a write cut short by a killed run
    (tmp_path / "notes.txt").write_text("the user's")  # not a cell: left alone
    # a run that fails keeps every cell (it may be resumed)
    failed = run_matrix(SOURCE, [choices[0], PolicyChoice("fifo", {"no_such_parameter": "1"})],
                        _workloads()[:1], CLUSTER, CONFIG, store=store)
    assert failed.failures and len(list(tmp_path.glob("*.json"))) == 4
    only = run_matrix(SOURCE, choices[:1], _workloads(), CLUSTER, CONFIG, store=store)
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".json") == ["notes.txt"]
    assert len(list(tmp_path.glob("*.json"))) == 2
    assert any("removed 2 simulation(s)" in note for note in only.notes)
    runner = CountingRunner()  # fifo's cells are still there to take
    again = run_matrix(SOURCE, choices[:1], _workloads(), CLUSTER, CONFIG, runner, store=store,
                       reuse=True)
    assert runner.cells == 0 and again.reused == 2 and not again.notes
