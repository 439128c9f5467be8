"""A job submission: what `corral submit` sends, how it is checked, and the JobSpec and
JobConfig made from it.

Defaults (decided here): M0 = `batch_size`; a non-adaptive job keeps it, an adaptive one may
grow to 8x M0 (Pollux (OSDI'21) §3.1 leaves the cap to the application); per-GPU batch from
max(1, M0/8) to M0; `gpus` within [min_gpus, max_gpus]. Bounds (outside them, or not JSON at
all, a one-line 422 names the field, so nothing can fail later in the executor): valid UTF-8
without NUL, env keys `[A-Za-z_][A-Za-z0-9_]*`, a program name not blank, MAX_ARGS,
MAX_STRING, MAX_COMMAND_CHARS, MAX_ENV, MAX_ENV_CHARS, MAX_NAME, MAX_GPUS, MAX_BATCH (each in
the OpenAPI schema, but for the two totals, which JSON Schema cannot state: in the field's
description); bodies over MAX_BODY_BYTES get 413. What `checked` changes is said (`adjustments`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import PurePath
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from corral.core.cluster import Cluster, gpu_type_key, gpu_type_problem
from corral.core.errors import InputError
from corral.core.jobs import JobSpec, LrRule
from corral.protocol.env import JobConfig

__all__ = ["Submission", "ADAPTIVE_MAX_FACTOR", "MAX_BODY_BYTES", "MAX_STRING", "MAX_ARGS",
           "MAX_ENV", "MAX_COMMAND_CHARS", "MAX_ENV_CHARS", "MAX_NAME", "MAX_GPUS", "MAX_BATCH", "safe_text", "one_line_validation_error",
           "check_body"]

ADAPTIVE_MAX_FACTOR = 8
_SCRIPTS = (".py", ".sh", ".ipynb")

MAX_BODY_BYTES = 1 << 20  # a request body (1 MiB); larger ones get 413
MAX_STRING = 4096  # characters of one argument, env value or path (Linux's PATH_MAX)
MAX_ARGS = 1024  # arguments of the command
MAX_COMMAND_CHARS = 16_384  # characters of all the command's arguments together
MAX_ENV = 256  # extra environment variables
MAX_ENV_CHARS = 16_384  # characters of all their keys and values together
MAX_NAME = 100  # characters of a job's name or model (app)
MAX_GPUS = 1 << 16  # GPUs a job may ask for (the cluster bound is checked after)
MAX_BATCH = 1 << 24  # total or per-GPU batch size
MAX_EPOCHS = 1 << 20
MAX_DURATION_S = 1e10  # a trace job's duration (over 300 years)
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _clean(text: str) -> str:
    """`text` if a process can take it: valid UTF-8 (no lone surrogate), no NUL byte."""
    if "\0" in text:
        raise ValueError("contains a NUL byte")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("is not valid UTF-8 (lone surrogate)") from None
    return text


def _env_key(key: str) -> str:
    if not _ENV_KEY.fullmatch(key):
        raise ValueError(f"env key '{safe_text(key)}' is not a variable name "
                         "([A-Za-z_][A-Za-z0-9_]*)")
    return key


def _program(command: list[str]) -> list[str]:
    """The command, if its first word names a program (not empty, not only blanks)."""
    if not command[0].strip():
        raise ValueError("the program name (the first argument) is empty")
    return command


def _sizes(sub: Submission) -> Submission:
    """The submission, if its command and env are within their total sizes."""
    if (n := sum(map(len, sub.command))) > MAX_COMMAND_CHARS:
        raise ValueError(f"command: {n} characters in all, over {MAX_COMMAND_CHARS}")
    if (n := sum(len(k) + len(v) for k, v in sub.env.items())) > MAX_ENV_CHARS:
        raise ValueError(f"env: {n} characters in all, over {MAX_ENV_CHARS}")
    return sub


def _gpu_type(name: str) -> str:
    if problem := gpu_type_problem(name):
        raise ValueError(problem)
    return gpu_type_key(name)


def _queue_name(name: str) -> str:
    from corral.service.tenants import queue_name_problem

    if problem := queue_name_problem(name):
        raise ValueError(problem)
    return name


def safe_text(text: str, limit: int = 80) -> str:
    """`text` shortened, with every unprintable character (NUL, newline, lone surrogate)
    escaped as Python writes it, for one-line messages and repaired records."""
    cut = text[:limit]
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in cut) + (
        "..." if len(text) > limit else "")


def one_line_validation_error(errors: Sequence[Any], what: str = "submission") -> str:
    """pydantic errors as one line: `invalid <what>: field: problem; field: problem` (client
    text escaped, at most five problems)."""
    parts = []
    for err in errors[:5]:
        if err.get("type") == "json_invalid":  # FastAPI: loc ("body", <offset>), "JSON decode error"
            why = (err.get("ctx") or {}).get("error")
            parts.append("body: not valid JSON" + (f" ({safe_text(str(why), 200)})" if why else ""))
            continue
        loc = [safe_text(str(x), 40) for x in err.get("loc", ()) if x not in ("body",)]
        parts.append(f"{'.'.join(loc) or 'body'}: {safe_text(str(err.get('msg', 'invalid')), 200)}")
    more = f"; and {len(errors) - 5} more" if len(errors) > 5 else ""
    return f"invalid {what}: " + "; ".join(parts) + more


Text = Annotated[str, Field(max_length=MAX_STRING), AfterValidator(_clean)]
EnvKey = Annotated[str, Field(max_length=256), AfterValidator(_clean), AfterValidator(_env_key)]
Gpus = Annotated[int, Field(ge=1, le=MAX_GPUS)]
Batch = Annotated[int, Field(ge=1, le=MAX_BATCH)]


class Submission(BaseModel):
    """POST /jobs body."""

    model_config = ConfigDict(extra="forbid")

    command: Annotated[list[Text], AfterValidator(_program)] = Field(
        min_length=1, max_length=MAX_ARGS,
        description=f"the program and its arguments (at most {MAX_COMMAND_CHARS} characters in "
        "all; the first, the program, not blank)",
        json_schema_extra={"prefixItems": [{"type": "string", "minLength": 1,
                                            "maxLength": MAX_STRING, "pattern": r"\S"}]})
    name: Annotated[str, Field(max_length=MAX_NAME), AfterValidator(_clean)] | None = None
    cwd: Text = Field(".", description="working directory of the workers")
    env: dict[EnvKey, Text] = Field(
        default_factory=dict, max_length=MAX_ENV, description="extra environment variables "
        f"(at most {MAX_ENV_CHARS} characters of keys and values in all)")
    gpus: Gpus | None = Field(None, description="the user's GPU count (default: min_gpus)")
    min_gpus: Gpus = 1
    max_gpus: Gpus | None = None
    app: Annotated[str, Field(max_length=MAX_NAME), AfterValidator(_clean)] | None = Field(
        None, description="the job's model (application), for policies and the "
        "emulated executor, which needs it: a catalog or profile name (default: the name)")
    batch_size: Batch = Field(32, description="total batch size M0 the job was tuned for")
    init_batch_size: Batch | None = Field(
        None, description="M0, the total batch its learning rate was tuned for, where it differs "
        "from the user's batch_size (as in the Pollux workloads; default: batch_size)")
    max_batch_size: Batch | None = None
    min_local_bsz: Batch | None = None
    max_local_bsz: Batch | None = None
    adaptive: bool = False
    lr_rule: LrRule = LrRule.ADASCALE
    epochs: Annotated[int, Field(ge=1, le=MAX_EPOCHS)] | None = Field(
        None, description="epochs the job trains for, where it says (the emulated executor's "
        "job ends after them; default: its model's)")
    one_gpu_split_bsz: Batch | None = Field(
        None, description="on one GPU, a total batch above this many samples trains as at "
        "least two micro-batches (AdaptDL's rule, which the Pollux measurements replay; "
        "JobSpec.one_gpu_split_bsz)")
    trace_duration_s: Annotated[float, Field(gt=0, le=MAX_DURATION_S, allow_inf_nan=False)] \
        | None = Field(None, description="the emulated executor: the job's run time in its "
                       "source trace on `gpus` GPUs at `batch_size`; its model's epochs are "
                       "scaled to take that long (JobSpec.trace_duration_s)")
    gpu_type: Annotated[str, Field(max_length=32), AfterValidator(_gpu_type)] | None = Field(
        None, description="the GPU type the job may run on (e.g. v100; JobSpec.gpu_type); "
        "default: any")
    queue: Annotated[str, Field(max_length=64), AfterValidator(_queue_name)] | None = Field(
        None, description="the queue (team) the job runs in (`corral serve --queues`); "
        "default: the token's own queue, or `default` for the admin token")
    early_init: bool | None = Field(
        None, description="may its workers start (and initialise) on GPUs a job giving them up "
        "still trains on (SideCar's early initialisation)? true: the job waits at the start gate "
        "(corral.protocol.early: corral.train jobs do, a plain script that calls "
        "wait_for_start()); false: never, e.g. where two processes on one GPU do not fit; "
        "default: once the job has shown it runs corral.train")
    arrive_at_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        None, description="a scripted run only (`corral serve --executor emulated "
        "--lockstep-jobs N`, as `corral emulate` starts it): the job's arrival on the service's "
        "clock, not before now; the job waits unseen until then. Jobs are submitted in the "
        "order of their arrivals. Refused by any other service")

    @model_validator(mode="after")
    def _within_sizes(self) -> Submission:
        return _sizes(self)

    def _room(self, cluster_gpus: int, cluster: Cluster | None) -> tuple[int, str]:
        """The GPUs the job may run on and what they are called in messages: the cluster's,
        or, for a job restricted to a `gpu_type`, that type's (InputError, one line, when
        `cluster` has none of it)."""
        if self.gpu_type is None or cluster is None:
            return cluster_gpus, "the cluster has"
        if self.gpu_type not in cluster.gpu_types:
            have = ", ".join(t or "(unnamed)" for t in cluster.gpu_types) or "none"
            raise InputError(f"gpu_type {self.gpu_type}: the cluster has no GPUs of that type "
                             f"(its types: {have})")
        return cluster.gpus_of_type(self.gpu_type), f"the cluster has {self.gpu_type}:"

    def checked(self, cluster_gpus: int, cluster: Cluster | None = None) -> Submission:
        """The submission with defaults filled in; InputError (one line) when inconsistent.
        With `cluster`, a job restricted to a `gpu_type` must fit that type's GPUs."""
        cluster_gpus, has = self._room(cluster_gpus, cluster)
        max_gpus = self.max_gpus if self.max_gpus is not None else cluster_gpus
        gpus = self.gpus if self.gpus is not None else self.min_gpus
        if self.min_gpus > max_gpus:
            raise InputError(f"min_gpus ({self.min_gpus}) is larger than max_gpus ({max_gpus})")
        if not self.min_gpus <= gpus <= max_gpus:
            raise InputError(f"gpus ({gpus}) must lie within min_gpus..max_gpus "
                             f"({self.min_gpus}..{max_gpus})")
        if self.min_gpus > cluster_gpus or gpus > cluster_gpus:
            raise InputError(f"the job needs {max(self.min_gpus, gpus)} GPUs but {has} "
                             f"{cluster_gpus}")
        m0 = self.init_batch_size or self.batch_size
        max_bsz = self.max_batch_size or max(
            self.batch_size, m0 * ADAPTIVE_MAX_FACTOR if self.adaptive else m0)
        if max_bsz < max(m0, self.batch_size):
            raise InputError(f"max_batch_size ({max_bsz}) is smaller than batch_size "
                             f"({max(m0, self.batch_size)})")
        hi = self.max_local_bsz or m0
        lo = self.min_local_bsz or min(hi, max(1, m0 // 8))
        if lo > hi:
            raise InputError(f"min_local_bsz ({lo}) is larger than max_local_bsz ({hi})")
        return self.model_copy(update={"max_gpus": min(max_gpus, cluster_gpus), "gpus": gpus,
                                       "max_batch_size": max_bsz, "min_local_bsz": lo,
                                       "max_local_bsz": hi, "init_batch_size": m0})

    def adjustments(self, cluster_gpus: int, cluster: Cluster | None = None) -> list[str]:
        """What `checked(cluster_gpus)` changes of what the user asked for, one line each (the
        API answers them as the submission's `adjusted` and records each as an "adjusted"
        event): a max_gpus above the cluster's GPUs is capped to them. Defaults filled in where
        the user said nothing are not changes."""
        changes = []
        cluster_gpus, has = self._room(cluster_gpus, cluster)
        if self.max_gpus is not None and self.max_gpus > cluster_gpus:
            changes.append(f"max_gpus capped from {self.max_gpus} to {cluster_gpus} "
                           f"({has} {cluster_gpus} GPUs)")
        return changes

    def display_name(self) -> str:
        """The given name, else the script's (`python train.py --epochs 8` -> train)."""
        if self.name:
            return self.name
        scripts = [PurePath(part) for part in self.command if PurePath(part).suffix in _SCRIPTS]
        return (scripts[0] if scripts else PurePath(self.command[0])).stem or "job"

    def spec(self, job_id: str, submit_time_s: float) -> JobSpec:
        """The JobSpec policies see (call on a `checked()` submission)."""
        assert (self.gpus is not None and self.max_batch_size is not None
                and self.min_local_bsz is not None and self.max_local_bsz is not None
                and self.max_gpus is not None), "not a checked() submission"
        return JobSpec(
            name=job_id, submit_time_s=submit_time_s, app=self.app or self.display_name(),
            gpus=self.gpus, batch_size=self.batch_size,
            init_bsz=self.init_batch_size or self.batch_size, max_bsz=self.max_batch_size,
            min_local_bsz=self.min_local_bsz, max_local_bsz=self.max_local_bsz,
            min_gpus=self.min_gpus, max_gpus=self.max_gpus, adaptive=self.adaptive,
            lr_rule=self.lr_rule, epochs=self.epochs, trace_duration_s=self.trace_duration_s,
            one_gpu_split_bsz=self.one_gpu_split_bsz, gpu_type=self.gpu_type,
            queue=self.queue)

    def job_config(self, job_id: str) -> JobConfig:
        """The limits the job's workers are told (call on a `checked()` submission)."""
        assert (self.max_batch_size is not None and self.min_local_bsz is not None
                and self.max_local_bsz is not None), "not a checked() submission"
        return JobConfig(job_id=job_id, init_bsz=self.init_batch_size or self.batch_size,
                         max_bsz=self.max_batch_size,
                         min_local_bsz=self.min_local_bsz, max_local_bsz=self.max_local_bsz,
                         adaptive=self.adaptive, lr_rule=self.lr_rule.value)

    def describe(self) -> str:
        return shlex.join(self.command)


def check_body(body: dict[str, Any]) -> None:
    """InputError (one line, as the API would answer 422) unless `body` is a well-formed
    submission: lets `corral submit` refuse bad arguments before sending them."""
    from pydantic import ValidationError

    try:
        Submission.model_validate(body)
    except ValidationError as exc:
        raise InputError(one_line_validation_error(exc.errors())) from None
