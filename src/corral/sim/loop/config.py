"""Engine settings: the scheduling interval, the resize mechanism, interference, limits."""

from __future__ import annotations

from dataclasses import dataclass, field

from corral.sim.loop.mechanism import CheckpointRestart, Mechanism


@dataclass(frozen=True)
class EngineConfig:
    interval_s: float = 60.0  # the policy is called every interval (Pollux §5.1)
    #: How placement changes are carried out and what they cost (`corral.sim.loop.mechanism`).
    mechanism: Mechanism = field(default_factory=CheckpointRestart)
    #: Slowdown of a distributed (multi-node) job on a node shared with another distributed
    #: job (Pollux §5.3.2); 0 = no interference, the default.
    interference_slowdown: float = 0.0
    #: Stop after this much simulated time; unfinished jobs are reported as such, and the run
    #: says it stopped early. None (default): run until every job finishes, with a guard fitted
    #: to the trace (`corral.sim.loop.horizon`).
    max_time_s: float | None = None
    #: Take the speed shortcuts the policy's `Promises` allow (placement views reused, rounds
    #: skipped or kept without asking). False asks at every round with fresh full views: what
    #: tests/policies/test_promises.py compares each policy's promises against.
    trust_promises: bool = True

    @property
    def restart_delay_s(self) -> float:
        """Pause of a running job shrunk in place (checkpoint-restart: its fixed pause)."""
        return self.mechanism.overheads.shrink_s
