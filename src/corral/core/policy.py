"""The policy interface and the registry that finds policies by name.

A policy is `decide(snapshot) -> Decision`: the simulator and the live service build the same
`Snapshot` and apply the same `Decision`, so a policy never knows whether time is simulated.
Each policy declares its parameters as a dataclass with the papers' defaults; the CLI sets them
by name (`--set pollux.p=-1`).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from corral.core.errors import UnknownPolicyError
from corral.core.jobs import Decision, Snapshot


@dataclasses.dataclass
class NoParams:
    """A policy with nothing to tune."""


class Policy(ABC):
    """Base of every scheduling policy."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    #: True only for policies allowed to see true remaining work (`JobView.oracle`).
    oracle: ClassVar[bool] = False
    #: Also call `decide` right when a job arrives or completes, not only every interval.
    reacts_to_events: ClassVar[bool] = False
    #: The decision changes only when the set of jobs changes (arrival/completion), so the
    #: engine may skip rounds in which nothing arrived or finished. A pure speed promise.
    decides_on_change_only: ClassVar[bool] = False
    #: While every active job holds GPUs (none waits), `decide` gives each job the assignment
    #: it runs with, whatever else changed (a job left, time passed): a gang scheduler that
    #: admits jobs by their fixed GPU count (all fit, since all run) and never moves an
    #: admitted running job. The engine and the live loop then keep the last decision without
    #: asking (`should_decide`). A pure speed promise.
    keeps_running_when_none_waits: ClassVar[bool] = False
    #: Reads `Snapshot.completed` (views of the jobs finished so far, to learn from them). Only
    #: then do the engine and the live service keep a view of every finished job: the others
    #: get an empty tuple, so memory does not grow with finished jobs (10,000-job traces).
    learns_from_completed: ClassVar[bool] = False
    #: Decides from each job's spec, status and assignment alone, never from its progress
    #: (times held and waited, epoch, steps, metrics, estimator): the simulator may then show a
    #: job's earlier view again while its status and assignment are unchanged, rather than make
    #: a fresh one per active job per round (`SimJob.placement_view`). A pure speed promise;
    #: tests/policies/test_placement_views.py checks it against fresh views at every round.
    reads_only_placements: ClassVar[bool] = False

    def __init__(self, params: Any | None = None) -> None:
        self.params = params if params is not None else self.Params()

    @abstractmethod
    def decide(self, snapshot: Snapshot) -> Decision:
        """Return the assignments every active job should have from now on."""

    def stands_until(self) -> float:
        """After `decide`: the time before which `decide` would return the same decision again
        as long as no job arrives, leaves or otherwise changes (what sets the engine's and the
        live loop's "changed"). They skip asking at rounds before it and keep the decision in
        force (`should_decide`). A pure speed promise, like `decides_on_change_only`; the
        default promises nothing (-inf: asked every round)."""
        return -math.inf

    def job_left(self, name: str) -> None:
        """Job `name` left for good (finished, failed or cancelled): drop what is kept about it.

        The simulator's engine and the live control loop call this once per job that leaves,
        before the next `decide`, so a policy's per-job state lives as long as the job (what it
        learned from the job's measurements, pooled per application, may stay). Default:
        nothing is kept per job."""


_REGISTRY: dict[str, type[Policy]] = {}


def register_policy(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make a policy available by its `name`."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"policy {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


#: Packages whose import registers policies, imported by name on the registry's first lookup.
#: Core names the built-in policies' package but does not import it as code: `corral.policies`
#: sits above core (its modules import core), so a static import here would point upward.
POLICY_PACKAGES: tuple[str, ...] = ("corral.policies",)


def _load_builtin_policies() -> None:
    for package in POLICY_PACKAGES:
        importlib.import_module(package)  # cached after the first time by sys.modules


def policy_names() -> list[str]:
    _load_builtin_policies()
    return sorted(_REGISTRY)


def policy_class(name: str) -> type[Policy]:
    _load_builtin_policies()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; known: {', '.join(sorted(_REGISTRY))}"
        ) from None


def param_fields(cls: type[Policy]) -> list[tuple[str, Any, Any]]:
    """(name, type, default) of each parameter of a policy."""
    hints = typing.get_type_hints(cls.Params)
    out = []
    for f in dataclasses.fields(cls.Params):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        out.append((f.name, hints.get(f.name, str), default))
    return out


def _convert(policy: str, key: str, typ: Any, raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if raw.lower() in ("none", "null", ""):
            return None
        typ = args[0]
    try:
        if typ is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if typ in (int, float, str):
            return typ(raw)
    except ValueError:
        raise UnknownPolicyError(
            f"{policy}.{key}: cannot read {raw!r} as {getattr(typ, '__name__', typ)}") from None
    return raw


def create_policy(name: str, overrides: Mapping[str, Any] | None = None) -> Policy:
    """Instantiate a registered policy, setting the named parameters (strings are converted)."""
    cls = policy_class(name)
    fields = {n: t for n, t, _ in param_fields(cls)}
    values = {}
    for key, raw in (overrides or {}).items():
        if key not in fields:
            known = ", ".join(fields) or "none"
            raise UnknownPolicyError(f"policy {name!r} has no parameter {key!r}; its parameters: {known}")
        values[key] = _convert(name, key, fields[key], raw)
    try:
        params = cls.Params(**values)
    except (TypeError, ValueError) as exc:
        raise UnknownPolicyError(f"policy {name!r}: {exc}") from None
    return cls(params)
