"""Atomic checkpoints with a fallback: a crash at any moment leaves a loadable checkpoint.

Each save writes `ckpt-<seq>.pt` through `corral.protocol.files.atomic_write` (temporary file,
fsync, rename, fsync of the directory) and then deletes all but the newest `keep` (default 2)
checkpoints, so the previous one survives until the next save has completed. Loading tries the
newest first; a checkpoint that fails to load (truncated or corrupted on disk after it was
written) is renamed `*.corrupt` and the previous one is used (Pollux's jobs checkpoint to
CephFS, spec 1.4; a torn or damaged file there must not lose the job).

One checkpoint can be marked good (`mark_good`, a file `good` naming it): the state a divergence
goes back to (corral.train.recovery). The rotation keeps it, so it can be older than `keep`.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import torch

from corral.protocol.files import atomic_write

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

    def checkpoints(self) -> list[Path]:
        """Checkpoint files, newest first."""
        if not self.directory.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.directory.iterdir()
                 if (m := _NAME.fullmatch(p.name))]
        return [p for _, p in sorted(found, reverse=True)]

    def save(self, state: dict[str, Any]) -> Path:
        existing = self.checkpoints()
        seq = int(_NAME.fullmatch(existing[0].name).group(1)) + 1 if existing else 1
        path = atomic_write(self.directory / f"ckpt-{seq:08d}.pt", lambda f: torch.save(state, f))
        good = self._good_name()
        for old in self.checkpoints()[self.keep:]:
            if old.name != good:
                old.unlink(missing_ok=True)
        return path

    def mark_good(self, path: Path) -> None:
        """Mark the checkpoint at `path` (one this store saved) as the one to go back to."""
        previous = self._good_name()
        atomic_write(self.directory / _GOOD, lambda f: f.write(path.name.encode()))
        if previous and previous != path.name and \
                self.directory / previous not in self.checkpoints()[:self.keep]:
            (self.directory / previous).unlink(missing_ok=True)  # kept only for being good

    def load_good(self) -> tuple[dict[str, Any], Path] | None:
        """The checkpoint marked good when it loads, else the newest that loads."""
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
