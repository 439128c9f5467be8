"""The in-place resize protocol between an executor and a `corral.train` job (ONES §3.3.1).

Staying workers keep process, model, optimizer and device; no checkpoint on the path. Torch-free.
1. New workers start with generation g's rendezvous and `CORRAL_JOIN_GENERATION=g`, set up,
   write `ready-g<g>-r<rank>` into `CORRAL_CONTROL_DIR` and wait (old workers keep training).
2. All ready: the executor writes `resize-g<g>.json` (`ResizeRequest`) and sends SIGUSR1.
3. Old workers agree at a step boundary, leave the old group, exit `LEAVE_EXIT_CODE` or join g;
   new rank 0 (an old worker) broadcasts the training state.
4. Failure: old rank 0 checkpoints, old workers exit `STOP_EXIT_CODE` (checkpoint-restart).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from corral.protocol.files import atomic_write_json, read_json

__all__ = ["ResizeRequest", "ENV_CONTROL_DIR", "ENV_JOIN_GENERATION", "LEAVE_EXIT_CODE",
           "ready_path", "request_path", "write_request", "read_request", "mark_ready",
           "ready_ranks"]

ENV_CONTROL_DIR = "CORRAL_CONTROL_DIR"
ENV_JOIN_GENERATION = "CORRAL_JOIN_GENERATION"
#: Exit status of a worker that left the job in an in-place shrink (0 would mean "finished").
LEAVE_EXIT_CODE = 144


@dataclass(frozen=True)
class ResizeRequest:
    """Generation `generation` of the job's process group, as the executor planned it."""

    generation: int
    world_size: int
    master_addr: str
    master_port: int
    ranks: dict[int, int | None] = field(default_factory=dict)  # old rank -> new rank
    batch: tuple[int, int] | None = None  # (local_bsz, accum_steps) fixed by the policy
    num_nodes: int = 1
    launch: int = 0

    def __post_init__(self) -> None:
        kept = [r for r in self.ranks.values() if r is not None]
        if 0 not in kept:
            raise ValueError("an old worker must become rank 0: it holds the state to broadcast")
        if any(not 0 <= r < self.world_size for r in kept) or len(set(kept)) != len(kept):
            raise ValueError(f"new ranks {sorted(kept)} do not fit world size {self.world_size}")

    def new_rank(self, old_rank: int) -> int | None:
        return self.ranks.get(old_rank)

    def to_doc(self) -> dict:
        doc = asdict(self)
        doc["ranks"] = {str(k): v for k, v in self.ranks.items()}
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping) -> ResizeRequest:
        return cls(generation=int(doc["generation"]), world_size=int(doc["world_size"]),
                   master_addr=str(doc["master_addr"]), master_port=int(doc["master_port"]),
                   ranks={int(k): (None if v is None else int(v))
                          for k, v in dict(doc["ranks"]).items()},
                   batch=None if doc.get("batch") is None else tuple(doc["batch"]),
                   num_nodes=int(doc.get("num_nodes", 1)), launch=int(doc.get("launch", 0)))


def request_path(control_dir: str | Path, generation: int) -> Path:
    return Path(control_dir) / f"resize-g{generation}.json"


def ready_path(control_dir: str | Path, generation: int, rank: int) -> Path:
    return Path(control_dir) / f"ready-g{generation}-r{rank}"


def write_request(control_dir: str | Path, request: ResizeRequest) -> Path:
    return atomic_write_json(request_path(control_dir, request.generation), request.to_doc())


def read_request(control_dir: str | Path) -> ResizeRequest | None:
    """The newest request in `control_dir`, or None."""
    found = sorted(Path(control_dir).glob("resize-g*.json"),
                   key=lambda p: int(p.stem.split("-g")[1]))
    doc = read_json(found[-1]) if found else None
    return ResizeRequest.from_doc(doc) if isinstance(doc, dict) else None


def mark_ready(control_dir: str | Path, generation: int, rank: int) -> None:
    path = ready_path(control_dir, generation, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": os.getpid()}))


def ready_ranks(control_dir: str | Path, generation: int) -> set[int]:
    """Ranks of generation `generation` that have built their model and wait to join."""
    prefix = f"ready-g{generation}-r"
    return {int(p.name[len(prefix):]) for p in Path(control_dir).glob(prefix + "*")}
