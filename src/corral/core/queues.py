"""Teams sharing a cluster: a tree of queues with quotas, and each queue's GPU share per round.

A queues file (TOML, `parse_queues`; docs/queues.md, "The queues file", shows one) declares
one table per queue: `quota`, `parent` (cohorts nest), `limit`, `weight`, `priority`, with
`min_runtime_s`, `usage_half_life_s` and `start_waiting` at the top. Jobs run in leaf queues;
a job whose queue is unset or not a leaf runs in `default` (quota 0 when not declared). A
cohort without a `quota` guarantees the sum of its children's. `shares` is the pure function
the tenancy layer calls every round (after Kueue's cohorts and reclaimWithinCohort, KAI's deserved quota and
over-quota weight).
"""

from __future__ import annotations

import dataclasses
import difflib
import heapq
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.core.cluster import Cluster, gpu_type_key, gpu_type_problem
from corral.core.errors import InputError

DEFAULT_QUEUE = "default"
#: A Unix user's name as `useradd` takes it (POSIX portable characters, at most 32).
_USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,30}[A-Za-z0-9_.$-]?")
#: The key of a quota or limit of GPUs of any type: an untyped quota is the one-key case of
#: the map per GPU type (no GPU type may be named "*": `gpu_type_problem`)
ANY_TYPE = "*"
QUEUE_KEYS = ("quota", "limit", "weight", "parent", "priority", "run_as")
TOP_KEYS = ("queue", "min_runtime_s", "usage_half_life_s", "start_waiting")
#: A job (re)started less than this ago is not taken back for another queue, unless a queues
#: file says otherwise: about one restart's cost (the simulator's restart delay is 30 s), so a
#: job is not stopped before the restart it just paid for has been worth it, and a round that
#: preempts a job and the next that restarts it on the same slots (issue 43's churn: 3 s apart
#: under pollux) cannot happen. An in-place shrink is not held back by it.
DEFAULT_MIN_RUNTIME_S = 30.0


#: A quota or a limit: GPUs per GPU type, as (type, GPUs) pairs; `((ANY_TYPE, n),)` is n GPUs
#: of any type (`any_type(n)`)
PerType = tuple[tuple[str, int], ...]


def any_type(gpus: int | None) -> PerType | None:
    """`gpus` GPUs of any type, as a quota or limit (None stays None)."""
    return None if gpus is None else ((ANY_TYPE, gpus),)


@dataclass(frozen=True, slots=True)
class Queue:
    """One queue of the tree. `quota` and `limit` are one map each, keyed by GPU type, where an
    untyped quota is the one-key case (`ANY_TYPE`, `any_type`). `quota` None: a cohort
    guaranteeing its children's sum (a leaf: 0); `limit` None: unlimited. Given per type, a type
    missing from `quota` is 0, from `limit` unlimited."""

    name: str
    quota: PerType | None = None
    limit: PerType | None = None
    weight: float = 1.0
    parent: str | None = None
    priority: int = 0
    #: the Unix user its jobs run as (the service runs as root; `corral.service.tenants.
    #: check_run_as`), None: the service's own user
    run_as: str | None = None

    @property
    def typed(self) -> bool:
        """Is its quota or its limit given per GPU type?"""
        return any(p is not None and all(t != ANY_TYPE for t, _ in p)
                   for p in (self.quota, self.limit))

    @property
    def any_limit(self) -> int | None:
        """Its limit of GPUs of any type (None: none, or its limit is per type)."""
        return dict(self.limit).get(ANY_TYPE) if self.limit is not None else None

    def of_type(self, gpu_type: str) -> Queue:
        """This queue as seen when GPUs of `gpu_type` alone are shared: its quota and limit for
        that type, as GPUs of any type (an untyped queue is itself)."""
        if not self.typed:
            return self
        quota = None if self.quota is None else dict(self.quota).get(gpu_type, 0)
        limit = None if self.limit is None else dict(self.limit).get(gpu_type)
        return dataclasses.replace(self, quota=any_type(quota), limit=any_type(limit))


@dataclass(frozen=True)
class QueueTree:
    """The queues (in file order, `default` included) and the layer's options."""

    queues: tuple[Queue, ...]
    min_runtime_s: float = DEFAULT_MIN_RUNTIME_S
    usage_half_life_s: float | None = None
    source: str = "queues"
    #: the layer itself starts a queue's waiting jobs on GPUs of its guarantee that an elastic
    #: inner policy left idle (`QueuedPolicy._start_waiting`; docs/queues.md, "The layer"): a
    #: quota is a promise, so on unless a queues file turns it off
    start_waiting: bool = True
    _by_name: dict[str, Queue] = field(init=False, repr=False, compare=False)
    _children: dict[str | None, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    _quota: dict[str, int] = field(init=False, repr=False, compare=False)
    _per_type: dict[str, QueueTree] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_per_type", {})
        by_name = {q.name: q for q in self.queues}
        children: dict[str | None, list[str]] = {None: []}
        for q in self.queues:
            children.setdefault(q.parent, []).append(q.name)
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_children", {k: tuple(v) for k, v in children.items()})
        quota: dict[str, int] = {}

        def eff(name: str, seen: tuple[str, ...] = ()) -> int:
            if name in quota:
                return quota[name]
            q = by_name[name]
            kids = children.get(name, [])
            value = sum(g for _, g in q.quota) if q.quota is not None else (
                sum(eff(k, seen + (name,)) for k in kids) if kids else 0)
            quota[name] = value
            return value
        for q in self.queues:
            if q.parent is None or q.parent in by_name:
                try:
                    eff(q.name)
                except (KeyError, RecursionError):  # reported by validate()
                    pass
        object.__setattr__(self, "_quota", quota)

    def __getitem__(self, name: str) -> Queue:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def children(self, name: str | None) -> tuple[str, ...]:
        """The queues whose parent is `name` (None: the top-level queues)."""
        return self._children.get(name, ())

    @property
    def leaves(self) -> tuple[str, ...]:
        return tuple(q.name for q in self.queues if not self.children(q.name))

    def quota(self, name: str) -> int:
        """Guaranteed GPUs: the declared quota, or a cohort's children's sum (typed: over all
        types)."""
        return self._quota.get(name, 0)

    @property
    def typed(self) -> bool:
        """Are quotas or limits given per GPU type (then all of them are)?"""
        return any(q.typed for q in self.queues)

    @property
    def declared_types(self) -> tuple[str, ...]:
        """The GPU types the typed quotas and limits name, in file order."""
        seen: dict[str, None] = {}
        for q in self.queues:
            for pairs in (q.quota or (), q.limit or ()):
                seen.update((t, None) for t, _ in pairs if t != ANY_TYPE)
        return tuple(seen)

    def for_type(self, gpu_type: str) -> QueueTree:
        """The tree that shares the GPUs of `gpu_type` alone: each queue's quota and limit for
        that type (`Queue.of_type`); the tree itself when it is not typed."""
        if not self.typed:
            return self
        tree = self._per_type.get(gpu_type)
        if tree is None:
            tree = QueueTree(tuple(q.of_type(gpu_type) for q in self.queues), self.min_runtime_s,
                             self.usage_half_life_s, self.source, self.start_waiting)
            self._per_type[gpu_type] = tree
        return tree

    def type_quotas(self, name: str, gpu_types: tuple[str, ...]) -> dict[str, int]:
        """Guaranteed GPUs of queue `name` per type of `gpu_types` (typed trees)."""
        return {t: self.for_type(t).quota(name) for t in gpu_types}

    def ancestors(self, name: str) -> tuple[str, ...]:
        """`name`'s parent, its parent, ... up to a top-level queue."""
        out = []
        q = self._by_name[name].parent
        while q is not None:
            out.append(q)
            q = self._by_name[q].parent
        return tuple(out)

    def leaf_for(self, queue: str | None) -> str:
        """The leaf a job naming `queue` runs in: itself, or `default`."""
        if queue is not None and queue in self._by_name and not self.children(queue):
            return queue
        return DEFAULT_QUEUE

    def validate(self, total_gpus: int | None = None,
                 gpus_by_type: Mapping[str, int] | None = None) -> None:
        """InputError (one line: what and where) for a tree that cannot be honoured.
        `gpus_by_type`: the cluster's GPUs per type, where known (typed trees check each type
        against it, and that every type they name exists)."""
        where = self.source
        for q in self.queues:
            if q.parent is not None and q.parent not in self._by_name:
                hint = _did_you_mean(q.parent, self._by_name)
                raise InputError(f'{where}: queue "{q.name}": unknown parent "{q.parent}"{hint}')
        for q in self.queues:
            seen = [q.name]
            p = q.parent
            while p is not None:
                if p in seen:
                    cycle = " -> ".join(seen[seen.index(p):] + [p])
                    raise InputError(f'{where}: queue "{q.name}": cycle of parents: {cycle}')
                seen.append(p)
                p = self._by_name[p].parent
        if not self.typed:
            self._check_quotas(total_gpus)
            return
        self._check_typed(total_gpus, gpus_by_type)

    def _check_typed(self, total_gpus: int | None,
                     gpus_by_type: Mapping[str, int] | None) -> None:
        """`validate` for a typed tree: no quota or limit for any type, no unknown type, and
        each type's quotas and limits sound against that type's GPUs."""
        where = self.source
        typed = next(q.name for q in self.queues if q.typed)
        for q in self.queues:
            for key, pairs in (("quota", q.quota), ("limit", q.limit)):
                value = dict(pairs or ()).get(ANY_TYPE)
                if value is not None and (key, value) != ("quota", 0):  # 0: none of any type
                    raise InputError(
                        f'{where}: queue "{q.name}": {key} {value} is for any GPU type, but queue '
                        f'"{typed}" gives its quota per type; give every quota and limit per '
                        f"type, e.g. {key} = {{ v100 = {value} }}")
        if gpus_by_type is not None:
            known = tuple(t for t in gpus_by_type if t)
            for q in self.queues:
                for key, pairs in (("quota", q.quota), ("limit", q.limit)):
                    for t, _ in pairs or ():
                        if t != ANY_TYPE and t not in gpus_by_type:
                            has = (f"it has {', '.join(known)}" if known
                                   else "its GPUs have no type")
                            raise InputError(
                                f'{where}: queue "{q.name}": {key} names GPU type "{t}", which '
                                f"the cluster does not have ({has}){_did_you_mean(t, known)}")
        types = tuple(gpus_by_type) if gpus_by_type is not None else self.declared_types
        for t in types:
            self.for_type(t)._check_quotas(None if gpus_by_type is None else gpus_by_type[t], t)
        top = sum(self.quota(k) for k in self.children(None))
        if total_gpus is not None and top > total_gpus:
            raise InputError(f"{where}: the top-level queues' quotas add up to {top} GPUs, above "
                             f"the cluster's {total_gpus}")

    def _check_quotas(self, total_gpus: int | None, gpu_type: str = "") -> None:
        """Quotas within limits, parents and the cluster (`total_gpus` of `gpu_type`, where
        the tree is one type's, `for_type`)."""
        where = self.source
        of = f"{gpu_type} " if gpu_type else ""
        for q in self.queues:
            quota = self.quota(q.name)
            limit = q.any_limit
            if limit is not None and limit < quota:
                raise InputError(f'{where}: queue "{q.name}": {of}limit {limit} is below its '
                                 f'{of}quota {quota}')
            if total_gpus is not None and quota > total_gpus:
                raise InputError(f'{where}: queue "{q.name}": {of}quota {quota} exceeds the '
                                 f"cluster's {total_gpus} {of}GPUs")
            kids = self.children(q.name)
            below = sum(self.quota(k) for k in kids)
            if kids and below > quota:
                raise InputError(f'{where}: queue "{q.name}": its children\'s {of}quotas add up '
                                 f'to {below} GPUs, above its {of}quota {quota} '
                                 f'({", ".join(f"{k} {self.quota(k)}" for k in kids)})')
        top = sum(self.quota(k) for k in self.children(None))
        if total_gpus is not None and top > total_gpus:
            unit = f" {of}GPUs" if of else ""
            raise InputError(f"{where}: the top-level queues' {of}quotas add up to {top} GPUs, "
                             f"above the cluster's {total_gpus}{unit}")


def type_capacity(cluster: Cluster) -> dict[str, int]:
    """The cluster's GPUs per type (`validate`'s `gpus_by_type`; "" the unnamed type)."""
    return {t: cluster.gpus_of_type(t) for t in cluster.gpu_types}


def _did_you_mean(word: str, known: Any) -> str:
    close = difflib.get_close_matches(word, list(known), n=1)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _number(where: str, what: str, key: str, value: Any, *, integer: bool,
            positive: bool = False) -> float:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not math.isfinite(value):
        kind = "a whole number" if integer else "a number"
        raise InputError(f"{where}: {what}: {key} must be {kind}, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise InputError(f"{where}: {what}: {key} must be {'> 0' if positive else '>= 0'}, "
                         f"got {value!r}")
    return value


def _gpus(where: str, what: str, key: str, value: Any) -> PerType | None:
    """A quota or limit as the file gives it: a whole number (GPUs of any type) or a table per
    GPU type (`{ v100 = 8, k80 = 16 }`), as (type, GPUs) pairs; None when not given."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return any_type(int(_number(where, what, key, value, integer=True)))
    pairs = []
    for t, gpus in value.items():
        problem = gpu_type_problem(t)
        if problem is not None:
            raise InputError(f"{where}: {what}: {key}: {problem}")
        pairs.append((gpu_type_key(t), int(_number(where, what, f"{key}.{t}", gpus, integer=True))))
    return tuple(pairs)


def parse_queues(text: str, where: str = "queues.toml", total_gpus: int | None = None,
                 gpus_by_type: Mapping[str, int] | None = None) -> QueueTree:
    """A `QueueTree` from TOML text (module docstring); InputError naming `where` if bad.
    `total_gpus`, `gpus_by_type`: the cluster's GPUs, and per type, where known (`validate`)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: not valid TOML: {exc}") from None
    for key in doc:
        if key not in TOP_KEYS:
            raise InputError(f"{where}: unknown key {key!r}{_did_you_mean(key, TOP_KEYS)}; "
                             f"known: {', '.join(TOP_KEYS)}")
    tables = doc.get("queue", {})
    if not isinstance(tables, dict):
        raise InputError(f"{where}: `queue` must be tables ([queue.NAME]), got {tables!r}")
    queues = []
    for name, body in tables.items():
        what = f'queue "{name}"'
        if not isinstance(body, dict):
            raise InputError(f"{where}: {what} must be a table ([queue.{name}])")
        for key in body:
            if key not in QUEUE_KEYS:
                raise InputError(f"{where}: {what}: unknown key {key!r}"
                                 f"{_did_you_mean(key, QUEUE_KEYS)}; known: {', '.join(QUEUE_KEYS)}")
        quota = body.get("quota")
        limit = body.get("limit")
        parent = body.get("parent")
        if parent is not None and not isinstance(parent, str):
            raise InputError(f"{where}: {what}: parent must be a queue's name, got {parent!r}")
        if parent == name:
            raise InputError(f"{where}: {what}: cycle of parents: {name} -> {name}")
        priority = body.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InputError(f"{where}: {what}: priority must be a whole number, got {priority!r}")
        run_as = body.get("run_as")
        if run_as is not None and not (isinstance(run_as, str) and _USER_NAME.fullmatch(run_as)):
            raise InputError(f"{where}: {what}: run_as must be a Unix user's name (letters, "
                             f"digits, '_', '-', '.'), got {run_as!r}")
        queues.append(Queue(
            name=name, quota=_gpus(where, what, "quota", quota),
            limit=_gpus(where, what, "limit", limit),
            weight=float(_number(where, what, "weight", body.get("weight", 1.0), integer=False,
                                 positive=True)),
            parent=parent, priority=priority, run_as=run_as))
    names = {q.name for q in queues}
    if DEFAULT_QUEUE not in names:
        queues.append(Queue(DEFAULT_QUEUE, quota=any_type(0)))
    min_runtime = _number(where, "min_runtime_s", "value", doc.get("min_runtime_s", DEFAULT_MIN_RUNTIME_S),
                          integer=False)
    half = doc.get("usage_half_life_s")
    if half is not None:
        half = _number(where, "usage_half_life_s", "value", half, integer=False, positive=True)
    start_waiting = doc.get("start_waiting", True)
    if not isinstance(start_waiting, bool):
        raise InputError(f"{where}: start_waiting must be true or false, not {start_waiting!r}")
    tree = QueueTree(tuple(queues), float(min_runtime),
                     None if half is None else float(half), where, start_waiting)
    tree.validate(total_gpus, gpus_by_type)
    for q in tree.queues:
        if q.name == DEFAULT_QUEUE and tree.children(q.name):
            raise InputError(f'{where}: queue "{DEFAULT_QUEUE}" takes unnamed jobs: it cannot '
                             f"be a cohort")
    return tree


def queues_toml(tree: QueueTree) -> str:
    """A queues file (TOML) that `parse_queues` reads back as `tree` (given `tree.source`): the
    service keeps the tree `PUT /queues` set in it. Every key of QUEUE_KEYS and TOP_KEYS that is
    set is written, whatever its type (`tomllib` only reads)."""
    lines = [f"{key} = {_toml_value(getattr(tree, key))}" for key in TOP_KEYS
             if key != "queue" and getattr(tree, key) is not None
             and not (key == "start_waiting" and tree.start_waiting)]
    for q in tree.queues:
        lines += ["", f"[queue.{_toml_key(q.name)}]"]
        lines += [f"{key} = {_toml_value(_declared(q, key))}" for key in QUEUE_KEYS
                  if _declared(q, key) is not None]
    return "\n".join(lines).lstrip("\n") + "\n"


def _declared(q: Queue, key: str) -> Any:
    """Queue `q`'s value of file key `key` as the file gives it (a quota or a limit: GPUs of any
    type as a number, per GPU type as a mapping)."""
    value = getattr(q, key)
    if key in ("quota", "limit") and value is not None:
        per = dict(value)
        return per[ANY_TYPE] if ANY_TYPE in per else per
    return value


def _toml_key(key: str) -> str:
    bare = key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key)
    return key if bare else _toml_string(key)


def _toml_string(text: str) -> str:
    """A TOML basic string: quote, backslash and control characters escaped."""
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _toml_value(value: Any) -> str:
    """A TOML value: bool, int, float, string, or a mapping as an inline table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {value!r}")
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, Mapping):
        items = ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    raise TypeError(f"no TOML for {type(value).__name__}: {value!r}")


def load_queues(path: str | Path, total_gpus: int | None = None,
                gpus_by_type: Mapping[str, int] | None = None) -> QueueTree:
    """Read a queues file (module docstring); InputError names the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the queues file: {exc.strerror or exc}") from None
    return parse_queues(text, str(path.name if path.name else path), total_gpus, gpus_by_type)


def proportional_queues(gpu_s: Mapping[str | None, float], total_gpus: int, *,
                        min_runtime_s: float = DEFAULT_MIN_RUNTIME_S) -> QueueTree:
    """One flat queue per tenant, its quota its share of the GPU-time (`--quotas proportional`),
    rounded down and the remainder given by largest fraction, so quotas sum to the cluster."""
    named = {(k if k else DEFAULT_QUEUE): 0.0 for k in gpu_s}
    for k, v in gpu_s.items():
        named[k if k else DEFAULT_QUEUE] += max(0.0, float(v))
    total = sum(named.values())
    if total <= 0:
        quotas = {k: 0 for k in named}
    else:
        exact = {k: total_gpus * v / total for k, v in named.items()}
        quotas = {k: int(math.floor(x)) for k, x in exact.items()}
        left = total_gpus - sum(quotas.values())
        for k in sorted(exact, key=lambda k: (-(exact[k] - quotas[k]), k))[:max(0, left)]:
            quotas[k] += 1
    queues = [Queue(k, quota=any_type(quotas[k])) for k in sorted(named)]
    if DEFAULT_QUEUE not in named:
        queues.append(Queue(DEFAULT_QUEUE, quota=any_type(0)))
    tree = QueueTree(tuple(queues), float(min_runtime_s), None, "--quotas proportional")
    tree.validate(total_gpus)
    return tree


# --- shares ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shares:
    """One round's split of the cluster, per leaf queue (GPUs)."""

    share: dict[str, int]  # what the queue may hold this round
    fair: dict[str, int]  # its fair share of the demand (quota first, then by weight)
    guaranteed: dict[str, int]  # the part of its demand its quota (and its cohorts') guarantee
    demand: dict[str, int]  # its demand, capped by its and its cohorts' limits
    #: Leaves that gave GPUs back to queues below their quota, in the order they were taken.
    reclaimed_from: tuple[str, ...] = ()


def _subtree_demand(tree: QueueTree, demand: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}

    def walk(name: str) -> int:
        kids = tree.children(name)
        d = sum(walk(k) for k in kids) if kids else max(0, int(demand.get(name, 0)))
        limit = tree[name].any_limit
        out[name] = d if limit is None else min(d, limit)
        return out[name]
    for top in tree.children(None):
        walk(top)
    return out


def _split(tree: QueueTree, kids: tuple[str, ...], amount: int, cap: Mapping[str, int],
           weights: Mapping[str, float], base: Mapping[str, int]) -> dict[str, int]:
    """`amount` GPUs among `kids`: each its quota up to its `base` demand (higher priority
    first when they do not all fit), then the rest by weight up to `cap` (least given above
    that per weight first)."""
    out = {k: 0 for k in kids}
    left = amount
    for k in sorted(kids, key=lambda k: (-tree[k].priority, k)):
        g = min(tree.quota(k), base[k], cap[k], left)
        out[k] = g
        left -= g
    base = dict(out)
    heap = [((out[k] - base[k] + 1) / weights.get(k, tree[k].weight), -tree[k].priority, k)
            for k in kids if out[k] < cap[k]]
    heapq.heapify(heap)
    while left > 0 and heap:
        _, _, k = heapq.heappop(heap)
        out[k] += 1
        left -= 1
        if out[k] < cap[k]:
            heapq.heappush(heap, ((out[k] - base[k] + 1) / weights.get(k, tree[k].weight),
                                  -tree[k].priority, k))
    return out


def _allocate(tree: QueueTree, capacity: int, top_cap: Mapping[str, int],
              cap: Mapping[str, int], weights: Mapping[str, float],
              base: Mapping[str, int]) -> dict[str, int]:
    """Top-down: `capacity` among the top-level queues (each up to `top_cap`), then each
    queue's amount among its children (up to `cap`); every queue's amount, leaves and cohorts."""
    out: dict[str, int] = {}

    def down(parent: str | None, amount: int, caps: Mapping[str, int]) -> None:
        kids = tree.children(parent)
        given = _split(tree, kids, amount, caps, weights, base)
        for k, v in given.items():
            out[k] = v
            if tree.children(k):
                down(k, v, cap)
    down(None, capacity, top_cap)
    return out


def shares(tree: QueueTree, demand: Mapping[str, int], usage: Mapping[str, int],
           capacity: int, weights: Mapping[str, float] | None = None,
           base: Mapping[str, int] | None = None) -> Shares:
    """Each leaf queue's GPU share this round: guaranteed quota first, idle quota lent by weight
    through the parent cohort before the root, limits respected. `demand`: GPUs each leaf's jobs
    could use now (waiting plus held, or growable under an elastic policy); `usage`: GPUs held;
    `weights`: borrowing weights when not the declared ones; `base`: the part of demand the quota
    guarantees (default all; elastic growth is only borrowed). A queue below its quota takes GPUs
    back from leaves furthest above their fair share (per weight), lowest priority first, never
    below that share; one below its fair share of `base` takes elastic growth from leaves above
    theirs. Free GPUs go to leaves below their fair share, largest gap per weight first, then to
    any leaf with demand left."""
    weights = dict(weights or {})
    leaves = tree.leaves
    d = _subtree_demand(tree, demand)
    b = d if base is None else _subtree_demand(
        tree, {q: min(int(base.get(q, 0)), int(demand.get(q, 0))) for q in leaves})
    fair = _allocate(tree, capacity, d, d, weights, b)
    guaranteed = _allocate(tree, capacity, {k: min(tree.quota(k), b[k])
                                            for k in tree.children(None)}, b, weights, b)
    share = {q: min(max(0, int(usage.get(q, 0))), d[q]) for q in leaves}
    # a cohort's limit caps its subtree's holdings too: trim its lowest-priority leaves
    for cohort in (q for q in tree.queues if tree.children(q.name) and q.any_limit is not None):
        under = [q for q in leaves if cohort.name in tree.ancestors(q)]
        over = sum(share[q] for q in under) - (cohort.any_limit or 0)
        for q in sorted(under, key=lambda q: (tree[q].priority, -share[q], q)):
            if over <= 0:
                break
            cut = min(over, share[q])
            share[q] -= cut
            over -= cut

    def room(q: str, donor: str | None = None) -> int:
        """GPUs leaf `q` can still take (from `donor`: its cohorts' holdings do not change)."""
        r = d[q] - share[q]
        shared = () if donor is None else tree.ancestors(donor)
        for a in tree.ancestors(q):
            limit = tree[a].any_limit
            if limit is not None and a not in shared:
                r = min(r, limit - sum(share[x] for x in leaves if a in tree.ancestors(x)))
        return max(0, r)

    def w(q: str) -> float:
        return weights.get(q, tree[q].weight)

    reclaimed: list[str] = []
    free = capacity - sum(share.values())

    def serve(want: Mapping[str, int], floor: Mapping[str, int]) -> None:
        """Give each leaf `want[q]` more: idle GPUs first, then GPUs of the leaves above their
        `floor` (furthest above their fair share per weight, lowest priority first)."""
        nonlocal free
        need = {q: min(max(0, want[q]), d[q] - share[q]) for q in leaves}
        for q in sorted(leaves, key=lambda q: (-tree[q].priority, q)):
            take = min(need[q], free, room(q))
            share[q] += take
            need[q] -= take
            free -= take
        if not any(need.values()):
            return
        donors = sorted((q for q in leaves if share[q] > floor[q]),
                        key=lambda q: (tree[q].priority, -(share[q] - fair[q]) / w(q), q))
        for q in sorted(leaves, key=lambda q: (-tree[q].priority, q)):
            for donor in donors:
                if need[q] <= 0:
                    break
                take = min(need[q], share[donor] - floor[donor], room(q, donor))
                if take > 0 and donor != q:
                    share[donor] -= take
                    share[q] += take
                    need[q] -= take
                    if donor not in reclaimed:
                        reclaimed.append(donor)

    # reclaim to quota: from anyone above its fair share (a gang may be preempted)
    serve({q: guaranteed[q] - share[q] for q in leaves}, fair)
    # up to the fair share of what jobs asked for: only GPUs that no job asked for (elastic
    # jobs' growth, given back by shrinking them in place) change hands
    serve({q: min(fair[q], b[q]) - share[q] for q in leaves},
          {q: max(fair[q], b[q]) for q in leaves})
    # borrowing: idle GPUs to the leaves below their fair share, then to any with demand left
    while free > 0:
        short = [q for q in leaves if share[q] < fair[q] and room(q) > 0]
        if not short:
            break
        q = max(short, key=lambda q: ((fair[q] - share[q]) / weights.get(q, tree[q].weight),
                                      tree[q].priority, q))
        share[q] += 1
        free -= 1
    for q in sorted(leaves, key=lambda q: (-tree[q].priority, q)):
        take = min(free, room(q))
        share[q] += take
        free -= take
    return Shares(share, {q: fair[q] for q in leaves}, {q: guaranteed[q] for q in leaves},
                  {q: d[q] for q in leaves}, tuple(reclaimed))
