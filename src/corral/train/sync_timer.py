"""How long gradient synchronisation adds to a step: from the moment the first gradient bucket
is ready (DDP's communication hook starts its all-reduce) to the end of backward, when every
bucket has been reduced. That is the communication time Pollux's throughput model calls
T_sync (Pollux (OSDI'21) §3.2), overlapped with the rest of backward.

On the CPU (gloo) the host clock measures it: backward returns only when the reductions are
done. On a GPU the host only queues the work, so two CUDA events on the training stream take
its place, and their elapsed time is read once the GPU has passed them (`query()`, never a
wait): the figure arrives a few steps late, which the throughput profile does not mind.
"""

from __future__ import annotations

import time
from collections import deque

import torch

__all__ = ["SyncTimer"]


class SyncTimer:
    """Start at the first bucket, stop after backward; `latest()` is the newest finished span."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._host_start: float | None = None
        self._pending: deque[tuple[torch.cuda.Event, torch.cuda.Event]] = deque()
        self._open: torch.cuda.Event | None = None
        self._latest = 0.0

    def start(self) -> None:
        """The first gradient bucket of this step is ready (called once per step)."""
        if self._cuda:
            self._open = torch.cuda.Event(enable_timing=True)
            self._open.record()
        else:
            self._host_start = time.perf_counter()

    def stop(self) -> None:
        """Backward (and every bucket's reduction) has finished."""
        if self._cuda:
            if self._open is not None:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                self._pending.append((self._open, end))
                self._open = None
                while len(self._pending) > 64:  # never read (a stalled GPU): keep it bounded
                    self._pending.popleft()
        elif self._host_start is not None:
            self._latest = time.perf_counter() - self._host_start
            self._host_start = None

    def latest(self) -> float:
        """Seconds of the newest finished measurement (0 before any)."""
        while self._pending and self._pending[0][1].query():
            begin, end = self._pending.popleft()
            self._latest = begin.elapsed_time(end) / 1000.0
        return self._latest
