"""Matching a new worker set's first report to the resize decision it carried out, and what
that resize cost (corral.service.resizes)."""

from __future__ import annotations

import pytest

from corral.protocol.report import Report
from corral.service.resizes import PendingResize, measure_resize


def _in_place(launch: int, world: int, first_step: float, pause: float,
              first_step_s: float | None = None) -> Report:
    resumed: dict = {"in_place": launch - 1, "pause_s": pause}
    if first_step_s is not None:
        resumed["first_step_s"] = first_step_s
    return Report(launch=launch, world_size=world, first_step_time=first_step, resumed=resumed)


def _restarted(launch: int, world: int, first_step: float) -> Report:
    return Report(launch=launch, world_size=world, first_step_time=first_step,
                  resumed={"checkpoint": "ckpt-1.pt"})


def test_a_decision_made_while_the_last_was_carried_out_waits_for_it():
    # grown 1 -> 2 at 100 s; the next round (101 s) shrinks it again before the grow's new
    # worker set has reported: the grow is measured first, then the shrink, by restart
    pending = [PendingResize(100.0, 1, 2), PendingResize(101.0, 2, 1)]
    grow, rest = measure_resize(pending, _in_place(1, 2, first_step=104.0, pause=0.4))
    assert grow == {"launch": 1, "mechanism": "in-place", "from_gpus": 1, "to_gpus": 2,
                    "pause_s": 0.4, "to_new_size_s": 4.0}
    assert rest == [PendingResize(104.0, 2, 1)]  # the executor was busy with the grow until then
    shrink, rest = measure_resize(rest, _restarted(2, 1, first_step=109.0))
    assert shrink["mechanism"] == "checkpoint-restart" and shrink["from_gpus"] == 2
    assert shrink["pause_s"] == pytest.approx(5.0) and rest == []  # not 8 s from its decision


def test_decisions_overtaken_before_any_worker_set_started_are_dropped():
    # 1 -> 2, back to 1 and to 2 again before the executor acted: one resize, the last
    pending = [PendingResize(100.0, 1, 2), PendingResize(101.0, 2, 1), PendingResize(102.0, 1, 2)]
    record, rest = measure_resize(pending, _in_place(1, 2, first_step=105.0, pause=0.3))
    assert record["from_gpus"] == 1 and record["to_new_size_s"] == pytest.approx(3.0)
    assert rest == []


def test_a_report_that_measures_nothing_leaves_the_decisions_pending():
    assert measure_resize([], _in_place(1, 2, 104.0, 0.4)) is None
    resumed_without_a_step = Report(launch=3, world_size=1, resumed={"checkpoint": "c.pt"})
    assert measure_resize([PendingResize(100.0, 2, 1)], resumed_without_a_step) is None


def test_an_in_place_pause_runs_to_the_end_of_the_new_sizes_first_step():
    # as a checkpoint-restart's does (its first_step_time is the end of its first step)
    report = _in_place(1, 2, first_step=104.0, pause=0.3, first_step_s=0.5)
    record, _ = measure_resize([PendingResize(100.0, 1, 2)], report)
    assert record["pause_s"] == pytest.approx(0.8) and record["to_new_size_s"] == 4.0
