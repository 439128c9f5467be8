"""A copy of training state in host memory, taken without holding up the GPU or the host.

`to_cpu` copies tensor by tensor into pageable memory, each a synchronous transfer the host
waits for. `HostCopy` queues the copies instead: with GPU room for a second copy, the tensors
are gathered into one flat buffer per dtype on the training stream (few launches) and copied to
pinned memory on a side stream while training goes on; without the room, a pinned copy per
tensor is queued on the training stream. `result()` waits (only the reader does). On the CPU
it is `to_cpu`.
"""

from __future__ import annotations

from typing import Any

import torch

from corral.train.nested import map_leaves

__all__ = ["HostCopy", "to_cpu"]

#: GPU memory left free beside the clones, as a share of the state (the allocator rounds up).
_CLONE_HEADROOM = 0.25


def to_cpu(obj: Any) -> Any:
    """A copy of `obj` (nested dicts, lists, tuples of tensors) with every tensor on the CPU."""
    return map_leaves(obj, lambda x: x.detach().to("cpu", copy=True)
                      if isinstance(x, torch.Tensor) else x)


def _cuda_tensors(obj: Any) -> dict[int, torch.Tensor]:
    """The GPU tensors among `obj`'s leaves, by id (a tensor met twice counts once)."""
    found: dict[int, torch.Tensor] = {}

    def visit(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.is_cuda:
            found[id(x)] = x
        return x
    map_leaves(obj, visit)
    return found


def _room_for(nbytes: int, device: torch.device) -> bool:
    """Whether `nbytes` more (plus headroom) fit on `device`: free memory and the caching
    allocator's reserved but unused blocks."""
    free, _ = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return nbytes * (1 + _CLONE_HEADROOM) <= free + cached


class HostCopy:
    """`obj` copied to host memory, asynchronously on a GPU; `result()` is the copy."""

    def __init__(self, obj: Any) -> None:
        on_gpu = _cuda_tensors(obj)
        self._event: torch.cuda.Event | None = None
        self.cloned = False
        if len({t.device for t in on_gpu.values()}) != 1:  # none, or a model over several GPUs
            self._result = to_cpu(obj)
            return
        device = next(iter(on_gpu.values())).device
        nbytes = sum(t.numel() * t.element_size() for t in on_gpu.values())
        copies = None
        if _room_for(nbytes, device):
            try:
                copies = self._gathered(on_gpu, device)
                self.cloned = True
            except torch.cuda.OutOfMemoryError:  # room in total, but not in one piece
                pass
        if copies is None:
            copies = self._queued(on_gpu, device)

        def leaf(x: Any) -> Any:
            if not isinstance(x, torch.Tensor):
                return x
            return copies[id(x)] if x.is_cuda else x.detach().clone()
        self._result = map_leaves(obj, leaf)

    def _gathered(self, on_gpu: dict[int, torch.Tensor], device: torch.device
                  ) -> dict[int, torch.Tensor]:
        """One flat clone per dtype on the training stream (a few launches, not one per
        tensor: a state has hundreds), each sent to one pinned buffer on a side stream; the
        copies are views of those buffers."""
        main = torch.cuda.current_stream(device)
        by_dtype: dict[torch.dtype, list[tuple[int, torch.Tensor]]] = {}
        for key, t in on_gpu.items():
            by_dtype.setdefault(t.dtype, []).append((key, t))
        flats = {dtype: torch.cat([t.detach().reshape(-1) for _, t in group])
                 for dtype, group in by_dtype.items()}
        stream = torch.cuda.Stream(device)
        stream.wait_stream(main)
        copies: dict[int, torch.Tensor] = {}
        with torch.cuda.stream(stream):
            for dtype, flat in flats.items():
                host = torch.empty(flat.numel(), dtype=dtype, pin_memory=True)
                host.copy_(flat, non_blocking=True)
                flat.record_stream(stream)  # freed once the side stream is past the copy
                offset = 0
                for key, t in by_dtype[dtype]:
                    copies[key] = host[offset:offset + t.numel()].view(t.shape)
                    offset += t.numel()
            self._event = torch.cuda.Event()
            self._event.record(stream)
        return copies

    def _queued(self, on_gpu: dict[int, torch.Tensor], device: torch.device
                ) -> dict[int, torch.Tensor]:
        """No room on the GPU for a clone: each tensor's copy queued on the training stream."""
        copies = {}
        for key, t in on_gpu.items():
            copies[key] = torch.empty_like(t, device="cpu", pin_memory=True)
            copies[key].copy_(t.detach(), non_blocking=True)
        self._event = torch.cuda.Event()
        self._event.record(torch.cuda.current_stream(device))
        return copies

    def including(self, parts: dict[str, Any]) -> HostCopy:
        """This copy with more top-level entries, copied at once (host values, or device values
        read now): the state's counters taken after its tensors were queued."""
        self._result = {**self._result, **to_cpu(parts)}
        return self

    def done(self) -> bool:
        """Whether the copy has finished (never waits)."""
        return self._event is None or self._event.query()

    def result(self) -> Any:
        """The copy in host memory (waits for the transfers still under way)."""
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        return self._result
