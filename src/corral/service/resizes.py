"""What each resize of a running job cost, matched to the decision it carried out.

The loop notes every resize it decides (`PendingResize`) and measures it at the new worker
set's first report (`measure_resize`): in place, the pause the trainer measured; by
checkpoint-restart, decision to first step. A decision may come while an earlier one is being
carried out: each report matches the latest decision for its worker count (earlier ones were
overtaken), later ones stay pending and count from no earlier than that set's first step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from corral.protocol.report import Report
from corral.service.records import CHECKPOINT_RESTART, IN_PLACE, LaunchStart, launch_start

__all__ = ["PendingResize", "measure_resize"]


@dataclass(frozen=True)
class PendingResize:
    """A resize decided and not yet measured: when (on the service's clock) and between how many
    GPUs."""

    decided: float
    from_gpus: int
    to_gpus: int


def measure_resize(pending: Sequence[PendingResize], report: Report
                   ) -> tuple[dict[str, Any], list[PendingResize]] | None:
    """The resize record for the first report `report` of a new worker set ({"launch",
    "mechanism", "from_gpus", "to_gpus", "pause_s", "to_new_size_s"}) and the decisions still
    pending after it; None when the report cannot measure one (a launch that resumed a
    preempted job, or no decision pending)."""
    if not pending:
        return None
    resumed = report.resumed or {}
    mechanism = launch_start(resumed)
    in_place = mechanism is LaunchStart.IN_PLACE
    world = report.world_size
    matching = [i for i, p in enumerate(pending) if p.to_gpus == world]
    index = matching[-1] if matching else len(pending) - 1
    decision = pending[index]
    first_step = report.first_step_time
    if in_place and isinstance(resumed.get("pause_s"), (int, float)):
        # to the end of the new size's first step, as a checkpoint-restart's pause is counted
        first_step_s = resumed.get("first_step_s")
        pause = float(resumed["pause_s"]) + (
            float(first_step_s) if isinstance(first_step_s, (int, float)) else 0.0)
    elif not in_place and first_step is not None:
        pause = max(0.0, first_step - decision.decided)
    else:
        return None
    # in place, the job trained at its old size while its new workers started: the time
    # from the decision to the new size's first step is longer than the pause
    to_new_size = max(pause, first_step - decision.decided) if first_step is not None else pause
    record = {"launch": report.launch or 0,
              "mechanism": IN_PLACE if in_place else CHECKPOINT_RESTART,  # records.py's words
              "from_gpus": decision.from_gpus, "to_gpus": int(world or 0),
              "pause_s": round(pause, 3), "to_new_size_s": round(to_new_size, 3)}
    later = [p if first_step is None else replace(p, decided=max(p.decided, first_step))
             for p in pending[index + 1:]]
    return record, later
