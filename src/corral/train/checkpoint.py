"""Atomic checkpoints with a fallback: a crash at any moment leaves a loadable checkpoint.

Each save writes `ckpt-<seq>.pt` atomically (`corral.protocol.files`) and keeps the newest
`keep` (2); a checkpoint that fails to load is renamed `*.corrupt` and the previous one used.
`mark_good` names the state a divergence returns to (corral.train.recovery); rotation keeps it.
`save_async` writes on a background thread, so a routine checkpoint costs the trainer only the
host copy (corral.train.host_copy); at most one write is in flight, everything else queues
behind it, so the files read as if every save were synchronous; a failed background write
raises at the next save or `flush()`.
"""

from __future__ import annotations

import logging
import re
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from corral.protocol.files import atomic_write

if TYPE_CHECKING:
    from corral.train.host_copy import HostCopy

__all__ = ["CheckpointStore"]

log = logging.getLogger("corral.train")
_NAME = re.compile(r"ckpt-(\d{8})\.pt")
_GOOD = "good"  # names the checkpoint marked good


def _set_aside(path: Path) -> None:
    """Rename an unusable checkpoint so it no longer counts (another rank may have done it)."""
    try:
        path.replace(path.with_name(path.name + ".corrupt"))
    except OSError:
        pass


class CheckpointStore:
    """A directory of numbered checkpoints."""

    def __init__(self, directory: str | Path, keep: int = 2) -> None:
        if keep < 2:
            raise ValueError("keep at least 2 checkpoints, so one survives a bad newest one")
        self.directory = Path(directory)
        self.keep = keep
        self._writer: ThreadPoolExecutor | None = None  # started by the first save_async
        self._pending: Future | None = None
        self._last_seq = 0  # the newest sequence number handed out

    def checkpoints(self) -> list[Path]:
        """Checkpoint files, newest first (after the writes under way)."""
        self.flush()
        return self._listed()

    def _listed(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.directory.iterdir()
                 if (m := _NAME.fullmatch(p.name))]
        return [p for _, p in sorted(found, reverse=True)]

    def _next_path(self) -> Path:
        existing = self._listed()
        match = _NAME.fullmatch(existing[0].name) if existing else None  # (listed: they match)
        newest = int(match.group(1)) if match else 0
        self._last_seq = max(self._last_seq, newest) + 1
        return self.directory / f"ckpt-{self._last_seq:08d}.pt"

    def save(self, state: dict[str, Any]) -> Path:
        """Write `state` as the newest checkpoint now (after any write under way); its path."""
        self.flush()
        path = self._next_path()
        self._write(path, state)
        return path

    def save_async(self, copy: HostCopy) -> Path:
        """Write the state being copied to the host by `copy` on the background thread; the
        path it will have. Waits first for the previous background write."""
        self.flush()
        path = self._next_path()
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="corral-checkpoint")
        self._pending = self._writer.submit(lambda: self._write(path, copy.result()))
        return path

    def flush(self) -> None:
        """Wait for the background write under way; raises what made it fail."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Finish the write under way and stop the background thread."""
        try:
            self.flush()
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None

    def _write(self, path: Path, state: dict[str, Any]) -> None:
        atomic_write(path, lambda f: torch.save(state, f))
        good = self._good_name()
        for old in self._listed()[self.keep:]:
            if old.name != good:
                old.unlink(missing_ok=True)

    def mark_good(self, path: Path) -> None:
        """Mark the checkpoint at `path` (one this store saved) as the one to go back to;
        after the background write under way (of that checkpoint), if any, and only if it
        succeeds."""
        write = self._pending
        if write is None:
            self._mark_good(path)
            return
        assert self._writer is not None

        def after_the_write() -> None:
            write.result()  # done (the writer runs one task at a time); raises its failure
            self._mark_good(path)
        self._pending = self._writer.submit(after_the_write)

    def _mark_good(self, path: Path) -> None:
        previous = self._good_name()
        atomic_write(self.directory / _GOOD, lambda f: f.write(path.name.encode()))
        if previous and previous != path.name and \
                self.directory / previous not in self._listed()[:self.keep]:
            (self.directory / previous).unlink(missing_ok=True)  # kept only for being good

    def load_good(self) -> tuple[dict[str, Any], Path] | None:
        """The checkpoint marked good when it loads, else the newest that loads."""
        self.flush()
        good = self._good_name()
        if good:
            loaded = self._load(self.directory / good)
            if loaded is not None:
                return loaded, self.directory / good
        return self.load()

    def _good_name(self) -> str | None:
        try:
            name = (self.directory / _GOOD).read_text().strip()
        except OSError:
            return None
        return name if _NAME.fullmatch(name) else None

    def load(self) -> tuple[dict[str, Any], Path] | None:
        """The newest checkpoint that loads, and its path; None when there is none."""
        for path in self.checkpoints():
            state = self._load(path)
            if state is not None:
                return state, path
        return None

    @staticmethod
    def _load(path: Path) -> dict[str, Any] | None:
        """The state in `path`; None (and the file set aside) when it is unusable."""
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - any failure to read means "unusable"
            log.warning("checkpoint %s does not load (%s: %s); falling back to the previous one",
                        path.name, type(exc).__name__, exc)
            _set_aside(path)
            return None
        if not isinstance(state, dict):
            log.warning("checkpoint %s holds no state dict; skipping it", path.name)
            _set_aside(path)
            return None
        return state
