"""Tenants of the live service: one token per queue, who may see which job, and quota changes.

`corral serve --queues FILE` gives every queue of the file (cohorts and `default` included) a
token of its own, written once to `DATA_DIR/tokens/QUEUE` (mode 0600) for the admin to hand
out; the service keeps only a salted hash (`hash_token`). A queue's token covers the queue and,
for a cohort, every queue below it (`Principal.queues`): it submits to those leaves, and sees,
cancels and reads logs of their jobs only. The admin token (`DATA_DIR/token`) covers everything.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pwd
import re
import secrets
import stat
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.core.errors import InputError
from corral.core.queues import ANY_TYPE, DEFAULT_QUEUE, PerType, QueueTree

__all__ = ["Principal", "ADMIN", "Tenancy", "queue_name_problem", "check_tree_names",
           "check_change", "check_drops", "DROP_PARAM", "tree_diff", "queue_rows", "hash_token", "token_matches",
           "TOKENS_DIR"]

TOKENS_DIR = "tokens"
_META = "queue_tokens"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: the admin (every queue), or a queue's tenant."""

    admin: bool
    queue: str | None = None  # the queue whose token it is (None: the admin)
    queues: frozenset[str] = frozenset()  # that queue and every queue below it

    def sees(self, queue: str | None) -> bool:
        """May this principal see a job of `queue` (None: a job from before queues: default)?"""
        return self.admin or (queue or DEFAULT_QUEUE) in self.queues


ADMIN = Principal(admin=True)


def queue_name_problem(name: str) -> str | None:
    """Why `name` cannot be a live queue's name (its token file is named by it), or None."""
    if not _NAME.fullmatch(name):
        return (f'queue "{name[:80]}": a live queue\'s name is 1 to 64 of A-Z a-z 0-9 _ . - '
                "(not starting with . or -): its token file is named by it")
    return None


def check_tree_names(tree: QueueTree) -> None:
    for q in tree.queues:
        if problem := queue_name_problem(q.name):
            raise InputError(f"{tree.source}: {problem}")


def subtree(tree: QueueTree, name: str) -> frozenset[str]:
    """`name` and every queue below it."""
    out, todo = set(), [name]
    while todo:
        q = todo.pop()
        if q not in out:
            out.add(q)
            todo.extend(tree.children(q))
    return frozenset(out)


def hash_token(token: str, salt: str | None = None) -> str:
    """Salted SHA-256 of a token, kept in state.db (meta `queue_tokens`): tokens are 192 random
    bits, so a fast salted hash is as safe as a slow one; `token_matches` compares with
    `hmac.compare_digest`. A token kept survives restarts (its file may be deleted: the hash
    stays); a queue new to the file gets one at the next start or the `PUT /queues` adding it."""
    salt = salt or secrets.token_hex(16)
    digest = hashlib.sha256(bytes.fromhex(salt) + token.encode()).hexdigest()
    return f"sha256${salt}${digest}"


def token_matches(token: str, stored: str) -> bool:
    try:
        kind, salt, _ = stored.split("$")
        bytes.fromhex(salt)
    except ValueError:
        return False
    return kind == "sha256" and hmac.compare_digest(hash_token(token, salt).encode(),
                                                    stored.encode())


class Tenancy:
    """The queue tree the service runs and the queues' token hashes (thread-safe)."""

    def __init__(self, tree: QueueTree, hashes: Mapping[str, str]) -> None:
        self._lock = threading.Lock()
        self.tree = tree
        self.hashes = dict(hashes)

    @classmethod
    def start(cls, directory: Path, store: Any, tree: QueueTree) -> Tenancy:
        """Load the stored hashes and mint a token for every queue of `tree` without one."""
        tenancy = cls(tree, _stored_hashes(store))
        tenancy.mint(directory, store)
        return tenancy

    def mint(self, directory: Path, store: Any) -> list[str]:
        """Make a token for each queue of the tree that has none: its hash stored, the token
        written to DATA_DIR/tokens/QUEUE (0600). Returns the queues that got one."""
        with self._lock:
            new = [q.name for q in self.tree.queues if q.name not in self.hashes]
            if not new:
                return []
            folder = directory / TOKENS_DIR
            folder.mkdir(mode=0o700, exist_ok=True)
            folder.chmod(0o700)
            for name in new:
                token = secrets.token_urlsafe(24)
                path = folder / name
                tmp = folder / f".{name}.{os.getpid()}"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(token + "\n")
                os.replace(tmp, path)
                self.hashes[name] = hash_token(token)
            store.set_meta(_META, json.dumps(self.hashes, sort_keys=True))
            return new

    def principal(self, token: str) -> Principal | None:
        """The tenant whose token `token` is (of a queue in the current tree), or None."""
        with self._lock:
            tree, hashes = self.tree, dict(self.hashes)
        found = None
        for name, stored in hashes.items():  # every one compared: no early exit on a match
            if token_matches(token, stored) and name in tree:
                found = name
        if found is None:
            return None
        return Principal(admin=False, queue=found, queues=subtree(tree, found))

    def leaves_of(self, who: Principal) -> list[str]:
        tree = self.tree
        return [q for q in tree.leaves if who.admin or q in who.queues]

    def job_queue(self, who: Principal, queue: str | None) -> str:
        """The leaf a submission of `who` naming `queue` runs in; InputError (400) for an
        unknown queue or a cohort, PermissionError (403) for a queue not its own."""
        tree = self.tree
        if queue is None:
            if who.admin:
                return DEFAULT_QUEUE
            mine = self.leaves_of(who)
            if len(mine) == 1:
                return mine[0]
            raise InputError(f"this token covers several queues ({', '.join(mine)}): "
                             "name one (corral submit --queue NAME)")
        if queue not in tree:
            known = self.leaves_of(who)
            raise InputError(f'unknown queue "{queue[:80]}"; '
                             f"{'queues' if who.admin else 'yours'}: {', '.join(known)}")
        if not who.sees(queue):
            raise PermissionError(f'this token is queue "{who.queue}"\'s: it cannot submit '
                                  f'to queue "{queue}"')
        if tree.children(queue):
            leaves = [q for q in subtree(tree, queue) if q in tree.leaves]
            raise InputError(f'queue "{queue}" is a cohort: jobs run in its leaves '
                             f"({', '.join(sorted(leaves))})")
        return queue


def _stored_hashes(store: Any) -> dict[str, str]:
    text = store.meta(_META)
    try:
        doc = json.loads(text) if text else {}
    except ValueError:
        doc = {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def check_change(new: QueueTree, active: Mapping[str, Iterable[str]]) -> None:
    """InputError (one line) when active jobs are in a queue that is not a leaf of `new`.
    `active`: {queue: active job ids}."""
    for queue, ids in sorted(active.items()):
        ids = sorted(ids)
        if not ids:
            continue
        named = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
        if queue not in new:
            raise InputError(f'{new.source}: queue "{queue}" is gone but {len(ids)} active '
                             f"job(s) are in it ({named}): keep it until they end")
        if new.children(queue):
            raise InputError(f'{new.source}: queue "{queue}" would be a cohort but {len(ids)} '
                             f"active job(s) are in it ({named}): jobs run in leaves")


#: The PUT /queues query parameter that confirms dropping queues (`corral queues --set --drop`).
DROP_PARAM = "drop_queues"


def check_drops(old: QueueTree, new: QueueTree, confirmed: bool) -> None:
    """InputError (one line) when `new` declares no queue (an empty body would otherwise drop
    every team's), or drops queues of `old` without `confirmed` (`?drop_queues=true`): a
    typo in a queues file must not silently take a team's queue and token away. Queues with
    active jobs are refused whatever is confirmed (`check_change`)."""
    if not {q.name for q in new.queues} - {DEFAULT_QUEUE}:
        raise InputError(f"{new.source}: declares no queue ([queue.NAME] tables): to run "
                         "without queues, restart the service without --queues")
    dropped = sorted(q.name for q in old.queues if q.name not in new)
    if dropped and not confirmed:
        raise InputError(f"{new.source}: drops queue(s) {', '.join(dropped)} (their tokens "
                         f"stop working): send it again with ?{DROP_PARAM}=true (corral "
                         "queues --set FILE --drop) to confirm; nothing changed")


def check_run_as(tree: QueueTree, data_dir: Path, executor: str) -> None:
    """A queue's `run_as` user must exist, and can only be taken by a service that runs as root
    on the local executor (Ray's workers run as their node's user), whose data directory the
    user can pass through to its jobs' directories (every folder above it searchable by
    others: `open_for_run_as` then makes the data directory and jobs/ 0711, traverse-only).
    One-line InputError naming the queue otherwise."""
    for q in tree.queues:
        if q.run_as is None:
            continue
        what = f'{tree.source}: queue "{q.name}": run_as = "{q.run_as}"'
        if executor != "local":
            raise InputError(f"{what} needs --executor local (the {executor} executor's "
                             "workers run as their own user)")
        if os.geteuid() != 0:
            raise InputError(f"{what} needs corral serve to run as root, to start jobs as "
                             "another user")
        try:
            pwd.getpwnam(q.run_as)
        except KeyError:
            raise InputError(f"{what}: no such user on this machine") from None
        for folder in Path(data_dir).resolve().parents:
            if not folder.exists():
                continue  # made by the service: searchable (only the data directory is 0700)
            mode = folder.stat().st_mode
            if not mode & stat.S_IXOTH:
                raise InputError(f"{what}: the user cannot reach its jobs' folders: {folder} is "
                                 f"{stat.S_IMODE(mode):o}, not searchable by others (chmod o+x "
                                 "it, or put --data-dir where it is)")


def open_for_run_as(tree: QueueTree, data_dir: Path) -> None:
    """Where a queue runs jobs as another user: the data directory and its jobs/ folder become
    0711, so that the user passes through to its job's own folder (which the executor gives
    it) but lists neither; every file in them stays the service's, 0600 (`secure_dir`)."""
    if not any(q.run_as for q in tree.queues):
        return
    Path(data_dir).chmod(0o711)
    jobs = Path(data_dir) / "jobs"
    jobs.mkdir(mode=0o711, exist_ok=True)
    jobs.chmod(0o711)


def change_seen_by(detail: str, who: Principal) -> str | None:
    """The parts of a `tree_diff` line `who` may read: all for the admin; for a tenant, those
    about its own queues and the tree-wide settings (None: nothing of it is the tenant's)."""
    if who.admin:
        return detail
    def mine(part: str) -> bool:
        name = part.split(":", 1)[0].split(" ", 1)[0].lstrip("+-")
        return name in who.queues or part.startswith(("min_runtime_s ", "usage_half_life_s "))
    parts = [p for p in detail.split("; ") if mine(p)]
    return "; ".join(parts) or None


def tree_diff(old: QueueTree, new: QueueTree) -> str:
    """A short line of what changed: added, removed and changed queues."""
    parts = []
    for q in new.queues:
        if q.name not in old:
            parts.append(f"+{q.name} (quota {_amount(q.quota, new.quota(q.name))})")
    for q in old.queues:
        if q.name not in new:
            parts.append(f"-{q.name}")
    for q in new.queues:
        if q.name in old and old[q.name] != q:
            was = old[q.name]
            fields = [f"{f} {_amount(getattr(was, f), None)}->{_amount(getattr(q, f), None)}"
                      for f in ("quota", "limit") if getattr(was, f) != getattr(q, f)]
            fields += [f"{f} {getattr(was, f)}->{getattr(q, f)}"
                       for f in ("weight", "parent", "priority", "run_as")
                       if getattr(was, f) != getattr(q, f)]
            parts.append(f"{q.name}: {', '.join(fields)}")
    for f in ("min_runtime_s", "usage_half_life_s"):
        if getattr(old, f) != getattr(new, f):
            parts.append(f"{f} {getattr(old, f)}->{getattr(new, f)}")
    return "; ".join(parts) or "no change"


def _amount(per_type: PerType | None, undeclared: int | None) -> str:
    """A quota or limit as the queues file gives it: `8`, or per type `{v100 8, k80 4}`;
    `undeclared` where it is not given (a cohort's quota: its children's sum)."""
    if per_type is None:
        return str(undeclared)
    per = dict(per_type)
    if ANY_TYPE in per:
        return str(per[ANY_TYPE])
    return "{" + ", ".join(f"{t} {g}" for t, g in per_type) + "}"


def queue_rows(tree: QueueTree, used: Mapping[str, int], jobs: Mapping[str, int],
               waiting: Mapping[str, int], share: Mapping[str, int] | None,
               who: Principal = ADMIN,
               used_by_type: Mapping[str, Mapping[str, int]] | None = None
               ) -> list[dict[str, Any]]:
    """GET /queues: each queue `who` sees with its quota, limit, GPUs used by its jobs (a
    cohort: its subtree's), GPUs borrowed (used above quota) and last round's share. Where
    quotas are per GPU type, `quota` is their sum and `quota_by_type`, `limit_by_type` give
    them per type (else None); used, borrowed and share count GPUs of all types.
    `used_by_type` (per leaf queue) adds `used_by_type` to every row and, for a typed tree,
    `borrowed_by_type`: GPUs of each type held above that type's quota."""
    rows = []
    for q in tree.queues:
        if not who.admin and q.name not in who.queues:
            continue
        below = subtree(tree, q.name)
        use = sum(used.get(x, 0) for x in below)
        quota = tree.quota(q.name)
        rows.append({
            "name": q.name, "parent": q.parent, "leaf": not tree.children(q.name),
            "quota": quota, "limit": q.any_limit, "weight": q.weight, "priority": q.priority,
            "quota_by_type": _by_type(tree, q.name, "quota"),
            "limit_by_type": _by_type(tree, q.name, "limit"),
            "used": use, "borrowed": max(0, use - quota),
            "share": (sum(share.get(x, 0) for x in below) if share is not None else None),
            "jobs": sum(jobs.get(x, 0) for x in below),
            "waiting": sum(waiting.get(x, 0) for x in below)})
        if used_by_type is not None:
            held: dict[str, int] = {}
            for x in below:
                for t, g in used_by_type.get(x, {}).items():
                    held[t] = held.get(t, 0) + g
            rows[-1]["used_by_type"] = held
            quotas = _by_type(tree, q.name, "quota")
            if quotas is not None:
                rows[-1]["borrowed_by_type"] = {
                    t: max(0, g - quotas.get(t, 0)) for t, g in held.items()}
    return rows


def _by_type(tree: QueueTree, name: str, what: str) -> dict[str, int] | None:
    """A typed tree's quotas (a cohort without one: its children's sum) or declared limits of
    queue `name` per GPU type the tree names; None for an untyped tree."""
    if not tree.typed:
        return None
    if what == "quota":
        return tree.type_quotas(name, tree.declared_types)
    return {t: g for t, g in tree[name].limit or () if t != ANY_TYPE}
