"""How a running job is resized, and what that costs: a property of the execution mechanism.

The engine asks the mechanism how long a job pauses (no progress, GPUs held) when its placement
changes. Checkpoint-restart is the Pollux testbed's mechanism (30 s in its simulator); other
mechanisms (in-place scaling, SideCar's reshaping) plug in here so policies can be compared on
equal mechanisms.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.core.cluster import Placement


@dataclass(frozen=True, slots=True)
class CheckpointRestart:
    """Stop, checkpoint, restart on the new GPUs: a fixed pause for every placement change.

    A job's first start costs the same pause (its workers start and load), as in the reference
    simulator, where every allocation change, the first included, started the same countdown.
    """

    delay_s: float = 30.0
    name: str = "checkpoint-restart"

    def pause_s(self, app: str, old: Placement, new: Placement) -> float:
        return self.delay_s if new else 0.0
