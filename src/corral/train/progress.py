"""Where a job is: optimizer steps, epochs, scale-invariant progress and stream position.

`progress` counts scale-invariant iterations (AdaScale's sum of gains, Pollux §3): an
epoch ends when it reaches `|X| / M0` more, whatever batch sizes the job trained with.
`samples` is the position in the shared sample stream (corral.train.stream). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["TrainingProgress"]


@dataclass
class TrainingProgress:
    """The trainer's counters; checkpointed through `state_dict`."""

    steps: int = 0
    epoch: int = 0
    progress: float = 0.0
    samples: int = 0
    metrics: list[tuple[int, int, float]] = field(default_factory=list)
    loss: float | None = None  # mean training loss of the last report interval
    finished: bool = False

    def epoch_boundary(self, num_samples: int, init_bsz: int) -> float:
        """The progress at which the current epoch ends."""
        return num_samples * (self.epoch + 1) / init_bsz

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "epoch": self.epoch, "progress": self.progress,
                "samples": self.samples, "metrics": [list(m) for m in self.metrics],
                "loss": self.loss, "finished": self.finished}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps, self.epoch = int(state["steps"]), int(state["epoch"])
        self.progress, self.samples = float(state["progress"]), int(state["samples"])
        self.metrics = [(int(s), int(e), float(v)) for s, e, v in state.get("metrics", [])]
        self.loss = state.get("loss")
        self.finished = bool(state.get("finished", False))
