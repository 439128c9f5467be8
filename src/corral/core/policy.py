"""The policy interface and the registry that finds policies by name.

`PolicyRegistry` maps names to policy classes; `register_policy` adds a class to `REGISTERED`,
the registry every `@register_policy` fills. Core imports no policy: the built-in ones are
registered by importing `corral.policies`, whose `POLICIES` is the registry with all of them,
and the callers (cli, service, sim) take it from there.

A policy is `decide(snapshot) -> Decision`: the simulator and the live service build the same
`Snapshot` and apply the same `Decision`, so a policy never knows whether time is simulated.
Each policy declares its parameters as a dataclass with the papers' defaults; the CLI sets them
by name (`--set pollux.p=-1`).
"""

from __future__ import annotations

import dataclasses
import enum
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


class Reads(enum.Flag):
    """What a policy reads of a `Snapshot`: exactly one of PLACEMENTS or VIEWS, plus extras."""

    #: Each job's spec, status and assignment alone, never its progress: the simulator may show
    #: a job's earlier view again while its status and assignment are unchanged.
    PLACEMENTS = enum.auto()
    #: Full views: progress, times held and waited, metrics, estimator.
    VIEWS = enum.auto()
    #: True remaining work (`JobView.oracle`): simulator only, never live.
    ORACLE = enum.auto()
    #: Views of the jobs finished so far (`Snapshot.completed`); others get an empty tuple.
    COMPLETED = enum.auto()
    #: GPU types (`Node.gpu_type`, `JobSpec.gpu_type`): the policy is type-aware and keeps each
    #: job on one GPU type (and on its `gpu_type`) itself. The round loop then does not re-place
    #: its decisions (`corral.core.gpu_types.within_one_type`, applied to every other policy's
    #: on a cluster of several types), but still refuses a placement over two types.
    GPU_TYPES = enum.auto()


class Changes(enum.Flag):
    """Changes that make a policy be asked at once, not only at the next round."""

    NONE = 0
    ARRIVAL = enum.auto()  # a job was submitted
    COMPLETION = enum.auto()  # a job left: finished (live also: failed or cancelled)
    NODES = enum.auto()  # nodes joined or left (live only)


class Keeps(enum.Flag):
    """What a policy promises stays true between rounds: speed promises, checked for every
    registered policy against a run that trusts none (tests/policies/test_promises.py)."""

    NOTHING = 0
    #: The decision changes only when the set of jobs changes: rounds in between are skipped.
    DECISION_UNTIL_CHANGE = enum.auto()
    #: While every active job holds GPUs, `decide` gives each job what it runs (a gang
    #: scheduler admitting by fixed GPU count that never moves a running job): not asked then.
    RUNNING_WHEN_NONE_WAITS = enum.auto()


@dataclasses.dataclass(frozen=True)
class Promises:
    """What a policy reads, what it reacts to and what it keeps between rounds: declared once
    per policy class, checked at `register_policy`. The engine and the live loop take their
    shortcuts from it (the derived booleans below, read once per run, not per round)."""

    reads: Reads = Reads.VIEWS
    reacts_to: Changes = Changes.NONE
    keeps: Keeps = Keeps.NOTHING
    oracle: bool = dataclasses.field(init=False, repr=False, compare=False)
    placements_only: bool = dataclasses.field(init=False, repr=False, compare=False)
    learns_from_completed: bool = dataclasses.field(init=False, repr=False, compare=False)
    on_change_only: bool = dataclasses.field(init=False, repr=False, compare=False)
    keeps_running: bool = dataclasses.field(init=False, repr=False, compare=False)
    type_aware: bool = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kinds = {"reads": (self.reads, Reads), "reacts_to": (self.reacts_to, Changes),
                 "keeps": (self.keeps, Keeps)}
        for field, (value, kind) in kinds.items():
            if not isinstance(value, kind):
                raise TypeError(f"Promises.{field} must be a {kind.__name__}, not {value!r}")
        derived = {"oracle": Reads.ORACLE in self.reads,
                   "placements_only": Reads.PLACEMENTS in self.reads,
                   "learns_from_completed": Reads.COMPLETED in self.reads,
                   "on_change_only": Keeps.DECISION_UNTIL_CHANGE in self.keeps,
                   "keeps_running": Keeps.RUNNING_WHEN_NONE_WAITS in self.keeps,
                   "type_aware": Reads.GPU_TYPES in self.reads}
        for name, holds in derived.items():
            object.__setattr__(self, name, holds)

    def problems(self) -> list[str]:
        """What contradicts itself in this declaration (empty: none)."""
        found = []
        if (Reads.PLACEMENTS in self.reads) == (Reads.VIEWS in self.reads):
            found.append("reads exactly one of Reads.PLACEMENTS or Reads.VIEWS")
        if self.placements_only and self.reads & (Reads.ORACLE | Reads.COMPLETED):
            found.append("Reads.PLACEMENTS (spec, status and assignment alone) contradicts "
                         "reading oracle info or finished jobs, which carry progress")
        return found

    def without_shortcuts(self) -> Promises:
        """The same reads and reactions, but no speed promise: fresh full views, no kept
        decision (what `EngineConfig(trust_promises=False)` runs with)."""
        reads = self.reads & ~Reads.PLACEMENTS | Reads.VIEWS
        return Promises(reads=reads, reacts_to=self.reacts_to, keeps=Keeps.NOTHING)


class Policy(ABC):
    """Base of every scheduling policy."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    #: What the policy reads, reacts to and keeps (`Promises`), declared once per class. An
    #: instance may narrow it only (tiresias-gittins with a given distribution reads no
    #: finished jobs).
    promises: Promises = Promises()

    def __init__(self, params: Any | None = None) -> None:
        self.params = params if params is not None else self.Params()

    @abstractmethod
    def decide(self, snapshot: Snapshot) -> Decision:
        """Return the assignments every active job should have from now on."""

    def stands_until(self) -> float:
        """After `decide`: the time before which `decide` would return the same decision again
        as long as no job arrives, leaves or otherwise changes (what sets the engine's and the
        live loop's "changed"). They skip asking at rounds before it and keep the decision in
        force (`Rounds.should_decide`). A pure speed promise, like `Keeps.DECISION_UNTIL_CHANGE`; the
        default promises nothing (-inf: asked every round)."""
        return -math.inf

    def job_left(self, name: str) -> None:
        """Job `name` left for good (finished, failed or cancelled): drop what is kept about it.

        The simulator's engine and the live control loop call this once per job that leaves,
        before the next `decide`, so a policy's per-job state lives as long as the job (what it
        learned from the job's measurements, pooled per application, may stay). Default:
        nothing is kept per job."""


class PolicyRegistry:
    """Policy classes by name: what `--policy NAME` and `--set NAME.key=value` resolve against."""

    def __init__(self) -> None:
        self._classes: dict[str, type[Policy]] = {}

    def register(self, cls: type[Policy]) -> type[Policy]:
        """Class decorator: make a policy available by its `name`, once its `promises` hold."""
        if cls.name in self._classes and self._classes[cls.name] is not cls:
            raise ValueError(f"policy {cls.name!r} registered twice")
        check_promises(cls)
        self._classes[cls.name] = cls
        return cls

    def names(self) -> list[str]:
        return sorted(self._classes)

    def policy_class(self, name: str) -> type[Policy]:
        try:
            return self._classes[name]
        except KeyError:
            raise UnknownPolicyError(
                f"unknown policy {name!r}; known: {', '.join(self.names()) or 'none'}") from None

    def create(self, name: str, overrides: Mapping[str, Any] | None = None) -> Policy:
        """Instantiate policy `name`, setting the named parameters (strings are converted)."""
        return _instantiate(self.policy_class(name), overrides)

    def oracles(self) -> frozenset[str]:
        """The names of the policies that read what a real scheduler cannot know."""
        return frozenset(n for n, cls in self._classes.items() if cls.promises.oracle)


#: The registry `@register_policy` fills (built-in policies, and those of files a user loads).
REGISTERED = PolicyRegistry()
register_policy = REGISTERED.register


def check_promises(cls: type[Policy]) -> None:
    """ValueError naming the policy when its `promises` are no `Promises` or contradict
    themselves (or its `stands_until`, which a policy deciding only on change never uses)."""
    promises = cls.promises
    if not isinstance(promises, Promises):
        raise ValueError(f"policy {cls.name!r}: promises must be a Promises, not {promises!r}")
    found = promises.problems()
    if promises.on_change_only and cls.stands_until is not Policy.stands_until:
        found.append("Keeps.DECISION_UNTIL_CHANGE already stands until a change: its "
                     "stands_until() would never be asked")
    if found:
        raise ValueError(f"policy {cls.name!r}: contradictory promises: {'; '.join(found)}")


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


def _instantiate(cls: type[Policy], overrides: Mapping[str, Any] | None = None) -> Policy:
    """Instantiate policy class `cls`, setting the named parameters (strings are converted)."""
    name = cls.name
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
