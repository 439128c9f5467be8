"""A job submission: what `corral submit` sends, how it is checked, and the JobSpec and
JobConfig made from it.

Defaults where the user says nothing (decided here; the papers' jobs state all of these):
the initial batch M0 is `batch_size`; a non-adaptive job keeps it (max = M0), an adaptive job
may grow it to 8x M0 (Pollux allows "up to 32x" but leaves the cap to the application,
spec 2.3); the per-GPU batch may range from max(1, M0/8) to M0; `gpus` (the user's own
configuration, used by non-adaptive policies) lies within [min_gpus, max_gpus].
"""

from __future__ import annotations

import shlex
from pathlib import PurePath
from pydantic import BaseModel, ConfigDict, Field

from corral.core.errors import InputError
from corral.core.jobs import JobSpec, LrRule
from corral.train.env import JobConfig

__all__ = ["Submission", "ADAPTIVE_MAX_FACTOR"]

ADAPTIVE_MAX_FACTOR = 8
_SCRIPTS = (".py", ".sh", ".ipynb")


class Submission(BaseModel):
    """POST /jobs body."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(min_length=1, description="the program and its arguments")
    name: str | None = Field(None, max_length=100)
    cwd: str = Field(".", description="working directory of the workers")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables")
    gpus: int | None = Field(None, ge=1, description="the user's GPU count (default: min_gpus)")
    min_gpus: int = Field(1, ge=1)
    max_gpus: int | None = Field(None, ge=1)
    batch_size: int = Field(32, ge=1, description="total batch size M0 the job was tuned for")
    max_batch_size: int | None = Field(None, ge=1)
    min_local_bsz: int | None = Field(None, ge=1)
    max_local_bsz: int | None = Field(None, ge=1)
    adaptive: bool = False
    lr_rule: LrRule = LrRule.ADASCALE

    def checked(self, cluster_gpus: int) -> "Submission":
        """The submission with defaults filled in; InputError (one line) when inconsistent."""
        if not self.command[0].strip():
            raise InputError("command: the program name is empty")
        max_gpus = self.max_gpus if self.max_gpus is not None else cluster_gpus
        gpus = self.gpus if self.gpus is not None else self.min_gpus
        if self.min_gpus > max_gpus:
            raise InputError(f"min_gpus ({self.min_gpus}) is larger than max_gpus ({max_gpus})")
        if not self.min_gpus <= gpus <= max_gpus:
            raise InputError(f"gpus ({gpus}) must lie within min_gpus..max_gpus "
                             f"({self.min_gpus}..{max_gpus})")
        if self.min_gpus > cluster_gpus or gpus > cluster_gpus:
            raise InputError(f"the job needs {max(self.min_gpus, gpus)} GPUs but the cluster "
                             f"has {cluster_gpus}")
        m0 = self.batch_size
        max_bsz = self.max_batch_size or (m0 * ADAPTIVE_MAX_FACTOR if self.adaptive else m0)
        if max_bsz < m0:
            raise InputError(f"max_batch_size ({max_bsz}) is smaller than batch_size ({m0})")
        hi = self.max_local_bsz or m0
        lo = self.min_local_bsz or min(hi, max(1, m0 // 8))
        if lo > hi:
            raise InputError(f"min_local_bsz ({lo}) is larger than max_local_bsz ({hi})")
        return self.model_copy(update={"max_gpus": min(max_gpus, cluster_gpus), "gpus": gpus,
                                       "max_batch_size": max_bsz, "min_local_bsz": lo,
                                       "max_local_bsz": hi})

    def display_name(self) -> str:
        """The given name, else the script's (`python train.py --epochs 8` -> train)."""
        if self.name:
            return self.name
        scripts = [PurePath(part) for part in self.command if PurePath(part).suffix in _SCRIPTS]
        return (scripts[0] if scripts else PurePath(self.command[0])).stem or "job"

    def spec(self, job_id: str, submit_time_s: float) -> JobSpec:
        """The JobSpec policies see (call on a `checked()` submission)."""
        return JobSpec(
            name=job_id, submit_time_s=submit_time_s, app=self.display_name(), gpus=self.gpus,
            batch_size=self.batch_size, init_bsz=self.batch_size, max_bsz=self.max_batch_size,
            min_local_bsz=self.min_local_bsz, max_local_bsz=self.max_local_bsz,
            min_gpus=self.min_gpus, max_gpus=self.max_gpus, adaptive=self.adaptive,
            lr_rule=self.lr_rule)

    def job_config(self, job_id: str) -> JobConfig:
        """The limits the job's workers are told (call on a `checked()` submission)."""
        return JobConfig(job_id=job_id, init_bsz=self.batch_size, max_bsz=self.max_batch_size,
                         min_local_bsz=self.min_local_bsz, max_local_bsz=self.max_local_bsz,
                         adaptive=self.adaptive, lr_rule=self.lr_rule.value)

    def describe(self) -> str:
        return shlex.join(self.command)
