"""Mixed precision: torch.autocast around the forward pass, a GradScaler for fp16.

"bf16": autocast to bfloat16, no scaling. "fp16": autocast to float16 and a
`torch.amp.GradScaler` (loss scaled before backward, gradients unscaled before clipping; a
step with inf/NaN gradients is skipped and counts no progress). "fp32" (default): neither.
The scaler's state is checkpointed with the trainer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, cast

import torch

__all__ = ["Precision", "PRECISIONS"]

PRECISIONS = ("fp32", "bf16", "fp16")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Precision:
    """Autocast and loss scaling for one of PRECISIONS on `device`."""

    def __init__(self, mode: str, device: torch.device) -> None:
        if mode not in PRECISIONS:
            raise ValueError(f"unknown precision {mode!r}; choose one of {', '.join(PRECISIONS)}")
        self.mode = mode
        self.device = device
        self.scaler = torch.amp.GradScaler(device.type) if mode == "fp16" else None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The context to run the forward pass (and loss) in."""
        if self.mode == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=_DTYPES[self.mode])

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def grad_scale(self) -> Callable[[], torch.Tensor] | None:
        """A reader of the current loss scale as a device tensor (None: gradients unscaled)."""
        if self.scaler is None:
            return None
        # the scale tensor itself: no host read (set once the scaler scaled a loss, before
        # any gradient is read)
        return cast(Callable[[], torch.Tensor], self.scaler._get_scale_async)

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """optimizer.step(), skipped by the scaler when the gradients are not finite."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict[str, Any]:
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)
