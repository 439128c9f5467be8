"""An in-place resize's phases end at the executor's `ResizeDeadlines`, not at fixed figures:
the new workers' start at `ready_s`, the regroup `switch_s` after the request."""

from __future__ import annotations

import time

from corral.core.cluster import Placement
from corral.executors.base import WorkerPlan
from corral.executors.resize import READY_TIMEOUT_S, InPlaceResize, ResizeDeadlines


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
