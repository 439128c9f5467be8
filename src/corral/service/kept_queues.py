"""The queue tree `PUT /queues` set, kept in DATA_DIR so that a restart does not lose it.

Each successful `PUT /queues` writes the new tree to `DATA_DIR/queues-changed.toml` (a queues
file the operator can read, written to a temporary file and renamed), with a header naming the
SHA-256 of the `--queues` file's tree it replaced. At the next start (docs/queues.md, "In the
service"):

* the stored tree is in force when the `--queues` file declares the same tree as when it was
  replaced (a `queues-restored` event and log line say so);
* the file is in force when its tree has changed since: the operator's later edit wins, and the
  stored tree is moved to `queues-superseded.toml` (a `queues-superseded` event and log line);
* a stored file that cannot be read or used (not TOML, no header, a quota above the cluster)
  is moved to `queues-unreadable.toml` and the file is in force (`queues-unreadable`, one line).

The hash is of the file's tree in canonical form (`queues_toml`), so comments and layout are
not edits. Choosing reads only; `KeptQueues.apply` moves files and records, once the start
has passed every check (a failed start changes no file).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.core.errors import InputError
from corral.core.queues import QueueTree, parse_queues, queues_toml
from corral.service.tenants import check_tree_names, tree_diff

__all__ = ["KeptQueues", "StartTree", "STORED", "SUPERSEDED", "UNREADABLE", "tree_sha256"]

STORED = "queues-changed.toml"
SUPERSEDED = "queues-superseded.toml"
UNREADABLE = "queues-unreadable.toml"
_REPLACES = re.compile(r"^# replaces: sha256:([0-9a-f]{64})\s*$", re.M)
_SET_AT = re.compile(r"^# set: (\S+)\s*$", re.M)

log = logging.getLogger("corral.service")


def tree_sha256(tree: QueueTree) -> str:
    """The SHA-256 of `tree` in canonical TOML: equal trees, equal hashes."""
    return hashlib.sha256(queues_toml(tree).encode()).hexdigest()


@dataclass(frozen=True)
class StartTree:
    """The tree a start runs, and what to record about the stored one (nothing: no event)."""

    tree: QueueTree
    event: str | None = None  # queues-restored, queues-superseded or queues-unreadable
    detail: str = ""
    set_aside: str | None = None  # the name the stored file is moved to


class KeptQueues:
    """The stored tree of one data directory, for a service started with `file_tree`."""

    def __init__(self, directory: Path, file_tree: QueueTree) -> None:
        self.directory = directory
        self.path = directory / STORED
        self.file_tree = file_tree
        self.base = tree_sha256(file_tree)

    def save(self, tree: QueueTree) -> None:
        """Write `tree` (0600), atomically: a crash leaves the old file or the new one whole.
        OSError if it cannot be written (the caller keeps the old tree)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        name = " ".join(self.file_tree.source.split())  # a comment line stays one line
        text = (f"# The queue tree PUT /queues set (corral serve; docs/queues.md). At the next\n"
                f"# start it is in force instead of the --queues file {name}\n"
                f"# unless that file's queues have changed since; then the file wins and this\n"
                f"# is kept as {SUPERSEDED}.\n"
                f"# replaces: sha256:{self.base}\n"
                f"# set: {stamp}\n\n" + queues_toml(tree))
        tmp = self.directory / f".{STORED}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _sync_dir(self.directory)

    def choose(self, total_gpus: int,
               gpus_by_type: Mapping[str, int] | None = None) -> StartTree:
        """The tree this start runs (module docstring); reads only. `gpus_by_type`: the
        cluster's GPUs per type, for a stored tree with quotas per type."""
        name = self.file_tree.source
        if not self.path.exists():
            return StartTree(self.file_tree)
        try:
            stored, base, set_at = self._read(total_gpus, gpus_by_type)
        except InputError as exc:
            aside = _free_name(self.directory, UNREADABLE)
            return StartTree(self.file_tree, "queues-unreadable",
                             f"the stored queue tree cannot be used ({exc}): {name} is in force; "
                             f"the stored one is kept as {aside}", aside)
        if base != self.base:
            aside = _free_name(self.directory, SUPERSEDED)
            return StartTree(self.file_tree, "queues-superseded",
                             f"{name} has changed since PUT /queues set the stored tree "
                             f"({set_at}): the file is in force (from the stored tree: "
                             f"{tree_diff(stored, self.file_tree)}); the stored one is kept as "
                             f"{aside}", aside)
        return StartTree(stored, "queues-restored",
                         f"the tree PUT /queues set ({set_at}, {STORED}) is in force, not "
                         f"{name} (unchanged since): {tree_diff(self.file_tree, stored)}")

    def _read(self, total_gpus: int,
              gpus_by_type: Mapping[str, int] | None) -> tuple[QueueTree, str, str]:
        """The stored tree, the hash it names and when it was set; InputError if unusable."""
        try:
            text = self.path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{STORED}: cannot read it: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
        tree = parse_queues(text, STORED, total_gpus, gpus_by_type)
        check_tree_names(tree)
        base = _REPLACES.search(text)
        if base is None:
            raise InputError(f"{STORED}: no '# replaces: sha256:...' line")
        set_at = _SET_AT.search(text)
        return tree, base.group(1), set_at.group(1) if set_at else "at an unknown time"

    def apply(self, start: StartTree, store: Any, now_s: float) -> None:
        """Set the stored file aside as `start` says, log its line and record its event."""
        if start.event is None:
            return
        if start.set_aside is not None:
            try:
                os.replace(self.path, self.directory / start.set_aside)
            except OSError as exc:  # the next start says the same again: nothing lost
                log.warning("cannot move %s to %s: %s", self.path, start.set_aside,
                            exc.strerror or exc)
        (log.warning if start.event == "queues-unreadable" else log.info)("%s", start.detail)
        store.add_event(now_s, None, start.event, start.detail)


def _free_name(directory: Path, name: str) -> str:
    """`directory/name`, or NAME.1.toml, NAME.2.toml, ... if taken: an older tree set aside
    is not overwritten."""
    stem, suffix = os.path.splitext(name)
    path, n = directory / name, 1
    while path.exists():
        path = directory / f"{stem}.{n}{suffix}"
        n += 1
    return path.name


def _sync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable (best effort: not every file system allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
