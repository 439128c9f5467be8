"""The executor-to-job contract: environment variables a worker is started with.

Every worker gets the `torch.distributed` rendezvous variables (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so any `init_process_group("env://")` script runs
unchanged, plus `CORRAL_JOB_ID`, `CORRAL_CHECKPOINT_DIR` and `CORRAL_BACKEND` (enough for a
plain script that checkpoints on SIGTERM, SideCar (SC'20) §III-B-4), `CORRAL_JOB_CONFIG` (the
JSON `JobConfig` `corral.train` reads: batch limits as Pollux (OSDI'21) §4.1's, any batch a
policy fixed, report and checkpoint paths) and `CORRAL_GPU_TYPE` (the slot's GPU type as the
cluster names it, "" unnamed; steps are reported as that type's). Torch-free.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["JobConfig", "WorkerEnv", "ENV_CONFIG", "ENV_JOB_ID", "ENV_CHECKPOINT_DIR",
           "ENV_BACKEND", "ENV_GPU_TYPE", "STOP_EXIT_CODE"]

ENV_CONFIG = "CORRAL_JOB_CONFIG"
ENV_JOB_ID = "CORRAL_JOB_ID"
ENV_CHECKPOINT_DIR = "CORRAL_CHECKPOINT_DIR"
ENV_BACKEND = "CORRAL_BACKEND"
#: The GPU type of the worker's slot, set by the executor from the cluster's node type ("" on
#: a cluster without types); absent (standalone), the job names its type from its device
#: (corral.protocol.report.gpu_type_name), "" on the CPU.
ENV_GPU_TYPE = "CORRAL_GPU_TYPE"
#: Exit status of a worker that checkpointed and stopped because it was asked to (128 + SIGTERM,
#: as AdaptDL's workers; Pollux (OSDI'21) §4.2). Exit status 0 always means "finished".
STOP_EXIT_CODE = 143


@dataclass(frozen=True, slots=True)
class JobConfig:
    """What a training job is told about itself by the executor."""

    job_id: str = "local"
    init_bsz: int = 32  # M0: the batch size the learning rate was tuned for
    max_bsz: int = 32  # largest total batch the job may be given
    min_local_bsz: int = 1
    max_local_bsz: int = 32  # largest per-GPU batch that fits in memory
    adaptive: bool = False
    lr_rule: str = "adascale"
    batch: tuple[int, int] | None = None  # (local_bsz, accum_steps) fixed by the policy
    num_nodes: int = 1
    checkpoint_dir: str | None = None
    report_path: str | None = None
    report_interval_s: float = 30.0  # as PolluxAgent, Pollux (OSDI'21) §4.1
    checkpoint_interval_s: float = 600.0
    launch: int = 0  # how many times this job was started before (0 = first start)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> JobConfig:
        raw = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        if values.get("batch") is not None:
            values["batch"] = (int(values["batch"][0]), int(values["batch"][1]))
        return cls(**values)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> JobConfig | None:
        """The config an executor set, or None when the process was not started by one."""
        text = (os.environ if environ is None else environ).get(ENV_CONFIG)
        return cls.from_json(text) if text else None

    def replace(self, **changes: Any) -> JobConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def standalone(cls, batch_size: int, max_batch_size: int | None = None,
                   local_bsz_bounds: tuple[int, int] | None = None, lr_rule: str = "adascale",
                   checkpoint_dir: str | None = None) -> JobConfig:
        """The config of a script run on its own: adaptive when it allows a larger batch."""
        max_bsz = max_batch_size or batch_size
        lo, hi = local_bsz_bounds or (max(1, batch_size // 8), batch_size)
        return cls(init_bsz=batch_size, max_bsz=max_bsz, min_local_bsz=lo, max_local_bsz=hi,
                   adaptive=max_bsz > batch_size, lr_rule=lr_rule, checkpoint_dir=checkpoint_dir)


@dataclass(frozen=True, slots=True)
class WorkerEnv:
    """This worker's place in the job (torch.distributed's env:// variables)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    backend: str = ""  # "nccl" or "gloo" as the executor set it; "" standalone (trainer decides)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkerEnv:
        env = os.environ if environ is None else environ
        world = int(env.get("WORLD_SIZE", "1"))
        return cls(rank=int(env.get("RANK", "0")), world_size=world,
                   local_rank=int(env.get("LOCAL_RANK", "0")),
                   local_world_size=int(env.get("LOCAL_WORLD_SIZE", str(world))),
                   master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
                   master_port=int(env.get("MASTER_PORT", "29500")),
                   backend=env.get(ENV_BACKEND, ""))

    def to_env(self) -> dict[str, str]:
        return {"RANK": str(self.rank), "WORLD_SIZE": str(self.world_size),
                "LOCAL_RANK": str(self.local_rank), "LOCAL_WORLD_SIZE": str(self.local_world_size),
                "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port),
                **({ENV_BACKEND: self.backend} if self.backend else {})}
