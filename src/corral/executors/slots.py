"""Which devices of this machine a job's workers get: GPU ids, or numbered CPU slots.

GPUs come from CUDA_VISIBLE_DEVICES, else `nvidia-smi`; their GPU types from `nvidia-smi`'s
device names (`gpu_type_name`; torch-free). Without GPUs the machine offers a configured number
of CPU slots (one worker, one BLAS thread each), of one unnamed type or of the types
`--slots t4:2,a100:2` names (`parse_slots`). The slots of one type are one node of the executor's
cluster; a job takes the slots its placement names on each node (`acquire_on`), and one
restarted on no more slots keeps those it held. A slot has one holder and may be *promised* to
one job starting early on it (corral.executors.early; SideCar (SC'20) §III-B-1's `reserved`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence

from corral.core.cluster import gpu_type_key, gpu_type_problem
from corral.core.errors import InputError
from corral.protocol.report import gpu_type_name

__all__ = ["detect_gpus", "detect_gpu_types", "parse_slots", "SlotPool"]


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


def detect_gpu_types(ids: Sequence[int]) -> list[str]:
    """The GPU type of each of `ids` (nvidia-smi's indices), from `nvidia-smi`'s device names
    mapped as `corral.train` maps `torch.cuda.get_device_name` (`gpu_type_name`); "" for every
    GPU when nvidia-smi is missing or fails, or names a GPU it does not list (one unnamed type
    rather than a guess)."""
    smi = shutil.which("nvidia-smi")
    if smi is None or not ids:
        return [""] * len(ids)
    try:
        out = subprocess.run([smi, "--query-gpu=index,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return [""] * len(ids)
    return gpu_types_from_smi(out, ids)


def gpu_types_from_smi(out: str, ids: Sequence[int]) -> list[str]:
    """`detect_gpu_types` from nvidia-smi's `index, name` lines."""
    names: dict[int, str] = {}
    for line in out.splitlines():
        index, sep, name = line.partition(",")
        if sep and index.strip().isdigit():
            names[int(index)] = gpu_type_name(name.strip())
    types = [names.get(i, "") for i in ids]
    return types if all(types) else [""] * len(ids)


def parse_slots(text: str) -> list[str]:
    """`--slots`: `N` (N CPU slots of the one unnamed type) or `TYPE:N,TYPE:N,...` (that many
    slots of each named type, e.g. `t4:2,a100:2`, the types in that order). The type of each
    slot, in slot order; InputError (one line) otherwise."""
    text = text.strip()
    if text.isdigit():
        if int(text) < 1:
            raise InputError("--slots must be >= 1")
        return [""] * int(text)
    types: list[str] = []
    seen: set[str] = set()
    for part in text.split(","):
        m = re.fullmatch(r"\s*([^:\s]*)\s*:\s*(\d+)\s*", part)
        if not m:
            raise InputError(f"--slots {text!r}: part {part.strip()!r} is not TYPE:N "
                             "(e.g. --slots 4 or --slots t4:2,a100:2)")
        name, count = m.group(1), int(m.group(2))
        if problem := gpu_type_problem(name):
            raise InputError(f"--slots {text!r}: {problem}")
        if count < 1:
            raise InputError(f"--slots {text!r}: type {name} has no slots")
        key = gpu_type_key(name)
        if key in seen:
            raise InputError(f"--slots {text!r}: type {name} given twice (names match "
                             "whatever their case)")
        seen.add(key)
        types += [key] * count
    return types


class SlotPool:
    """Free and held device slots; `ids` are GPU ids or CPU slot numbers, `nodes` the node
    (index in the executor's cluster) of each, all node 0 by default."""

    def __init__(self, ids: Iterable[int], gpu: bool, nodes: Sequence[int] | None = None) -> None:
        self.ids = list(ids)
        if not self.ids:
            raise ValueError("a slot pool needs at least one slot")
        if nodes is not None and len(nodes) != len(self.ids):
            raise ValueError(f"{len(nodes)} nodes for {len(self.ids)} slots")
        self.node = dict(zip(self.ids, nodes if nodes is not None else [0] * len(self.ids)))
        self.gpu = gpu
        self._owner: dict[int, str] = {}
        self._promised: dict[int, str] = {}  # slot -> the job it goes to once it is released

    @property
    def size(self) -> int:
        return len(self.ids)

    def free(self, owner: str | None = None, node: int | None = None) -> list[int]:
        """Slots nobody holds and nobody else was promised (`owner` may take its own), on
        `node` (None: any)."""
        return [i for i in self.ids if i not in self._owner
                and self._promised.get(i, owner) == owner
                and (node is None or self.node[i] == node)]

    def on_node(self, node: int) -> int:
        """How many slots `node` has."""
        return sum(1 for i in self.ids if self.node[i] == node)

    def held(self, owner: str) -> list[int]:
        return [i for i in self.ids if self._owner.get(i) == owner]

    def acquire_on(self, owner: str, per_node: Mapping[int, int],
                   prefer: Iterable[int] = ()) -> list[int] | None:
        """`per_node[n]` free slots on each node n for `owner` (preferring `prefer`), all or
        none: None (nothing taken) if some node has too few free."""
        prefer = list(prefer)
        if any(count > len(self.free(owner, node)) for node, count in per_node.items()):
            return None
        got: list[int] = []
        for node, count in per_node.items():
            got += self.acquire(owner, count, prefer, node) or []
        return sorted(got)

    def acquire(self, owner: str, count: int, prefer: Iterable[int] = (),
                node: int | None = None) -> list[int] | None:
        """`count` free slots for `owner` (preferring `prefer`) on `node` (None: any), or None
        if too few are free."""
        free = self.free(owner, node)
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
