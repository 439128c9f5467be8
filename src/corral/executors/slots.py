"""Which devices of this machine a job's workers get: GPU ids, or numbered CPU slots.

GPUs come from CUDA_VISIBLE_DEVICES, else `nvidia-smi`; without GPUs the machine offers a
configured number of CPU slots (one worker, one BLAS thread each). A job restarted on no more
slots keeps those it held (fewer moves). A slot has at most one holder and may be *promised* to
one other job, the one starting early on it (corral.executors.early): SideCar (SC'20)
§III-B-1's `reserved` state; once released, only that job can acquire it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable

__all__ = ["detect_gpus", "SlotPool"]


def detect_gpus() -> list[int]:
    """Ids of the GPUs this process may use ([] when there are none)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [int(v) for v in visible.split(",") if v.strip().isdigit()]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [int(line) for line in out.split() if line.strip().isdigit()]


class SlotPool:
    """Free and held device slots; `ids` are GPU ids or CPU slot numbers."""

    def __init__(self, ids: Iterable[int], gpu: bool) -> None:
        self.ids = list(ids)
        if not self.ids:
            raise ValueError("a slot pool needs at least one slot")
        self.gpu = gpu
        self._owner: dict[int, str] = {}
        self._promised: dict[int, str] = {}  # slot -> the job it goes to once it is released

    @property
    def size(self) -> int:
        return len(self.ids)

    def free(self, owner: str | None = None) -> list[int]:
        """Slots nobody holds and nobody else was promised (`owner` may take its own)."""
        return [i for i in self.ids if i not in self._owner
                and self._promised.get(i, owner) == owner]

    def held(self, owner: str) -> list[int]:
        return [i for i in self.ids if self._owner.get(i) == owner]

    def acquire(self, owner: str, count: int, prefer: Iterable[int] = ()) -> list[int] | None:
        """`count` free slots for `owner` (preferring `prefer`), or None if too few are free."""
        free = self.free(owner)
        if count > len(free):
            return None
        preferred = [i for i in prefer if i in free]
        chosen = (preferred + [i for i in free if i not in preferred])[:count]
        for i in chosen:
            self._owner[i] = owner
            self._promised.pop(i, None)
        return sorted(chosen)

    def promise(self, owner: str, ids: Iterable[int]) -> None:
        """Promise `ids` (held by another job now, which is giving them up) to `owner`: once
        released, only `owner` can acquire them. A slot is promised to one job at a time."""
        for i in ids:
            if self._promised.get(i, owner) != owner:
                raise ValueError(f"slot {i} is promised to {self._promised[i]} already")
            self._promised[i] = owner

    def promised(self, owner: str | None = None) -> list[int]:
        """Slots promised to `owner` (to anyone: None) and not yet acquired."""
        return [i for i in self.ids if i in self._promised
                and (owner is None or self._promised[i] == owner)]

    def withdraw(self, owner: str) -> None:
        """Drop every promise made to `owner`."""
        for i in self.promised(owner):
            del self._promised[i]

    def release(self, owner: str, ids: Iterable[int] | None = None) -> None:
        """Free `owner`'s slots: all of them, or only `ids` (workers that left a job)."""
        for i in self.held(owner) if ids is None else ids:
            if self._owner.get(i) == owner:
                del self._owner[i]
