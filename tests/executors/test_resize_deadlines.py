"""An in-place resize's phases end at the executor's `ResizeDeadlines`, not at fixed figures:
the new workers' start at `ready_s`, the regroup `switch_s` after the request; and which
running launches may be resized in place at all."""

from __future__ import annotations

import time

from corral.core.cluster import Placement
from corral.executors.base import WorkerPlan
from corral.executors.resize import (
    READY_TIMEOUT_S,
    InPlaceResize,
    ResizeDeadlines,
    runs_corral_train,
)
from corral.protocol.report import Report


def test_each_phase_ends_at_the_deadline_it_was_given() -> None:
    plan = WorkerPlan(Placement(((0, 2),)))
    default = InPlaceResize(plan, generation=1, old_world=1, port=1)
    assert default.deadline == default.started + READY_TIMEOUT_S
    r = InPlaceResize(plan, generation=1, old_world=1, port=1,
                      limits=ResizeDeadlines(ready_s=0.0, switch_s=600.0))
    time.sleep(0.01)
    assert r.timed_out()  # the joining phase: ready_s
    r.switch()
    assert not r.timed_out() and r.switched is not None
    assert r.deadline == r.switched + 600.0  # the switching phase: switch_s


def test_a_launch_that_just_regrouped_in_place_may_be_resized_again_before_its_first_step() -> None:
    """Every rank of a regrouped launch has its SIGUSR1 handler (the old workers kept theirs,
    a joiner installs its own before it is ready), so the next resize need not wait for a
    step; a fresh launch that has taken none may still lack handlers, and another launch's
    report or another pid says nothing about this one."""
    stepped = Report(state="running", launch=2, pid=41, first_step_time=1.0)
    regrouped = Report(state="running", launch=2, pid=41, resumed={"in_place": 2})
    fresh = Report(state="running", launch=2, pid=41, resumed={"in_place": 0, "checkpoint": "c"})
    assert runs_corral_train(stepped, 2, 41) and runs_corral_train(regrouped, 2, 41)
    assert not runs_corral_train(fresh, 2, 41)
    assert not runs_corral_train(Report(state="running", launch=0, pid=41, resumed={"in_place": 0}), 0, 41)
    assert not runs_corral_train(regrouped, 3, 41)  # the report of an earlier launch
    assert not runs_corral_train(regrouped, 2, 42)  # another process is rank 0
    assert not runs_corral_train(Report(state="stopped", launch=2, pid=41, first_step_time=1.0), 2, 41)
    assert not runs_corral_train(None, 2, 41)
