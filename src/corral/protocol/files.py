"""Crash-safe file writes: write a temporary file, fsync it, rename it over the target, fsync
the directory. A reader sees either the old file or the complete new one, never a torn write,
even if the writer is killed (SIGKILL, power loss) midway. Torch-free.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write", "atomic_write_json", "read_json"]


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any],
                 durable: bool = True) -> Path:
    """Create or replace `path` with what `write(file)` writes, atomically (a reader sees the
    old file or the new one, never a part) and, when `durable`, surviving a machine crash
    (fsync of the file and of its directory: milliseconds, more on a slow disk)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        _fsync_dir(path.parent)
    return path


def atomic_write_json(path: str | Path, obj: Any, durable: bool = True) -> Path:
    data = json.dumps(obj, separators=(",", ":")).encode()
    return atomic_write(path, lambda f: f.write(data), durable)


def read_json(path: str | Path) -> Any | None:
    """The JSON in `path`, or None when it is missing or unreadable or a symbolic link (a job
    writes in its own directory and must not point the service at another file)."""
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None
