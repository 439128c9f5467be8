"""Finished cells of a sweep kept on disk, so that a sweep stopped part-way can resume.

`run_matrix` stores each cell's `SimResult` as it finishes (one JSON file per cell, written
atomically) and a resumed run takes them instead of rerunning. A cell is found only under the
key of everything its result depends on (`cell_key`: policy and settings, workload, cluster,
engine settings, truth files, corral's own files), so a kept result never mixes with another
simulation; JSON keeps floats exactly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from corral.core.cluster import Cluster
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.results import JobRecord, SimResult
from corral.sim.truth.source import TruthSource
from corral.sim.workloads import Workload

#: Bumped when the stored layout of a result changes.
FORMAT = 1


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of every file of the installed corral package (code and built-in data)."""
    import corral

    return _files_digest(Path(corral.__file__).parent)


@lru_cache(maxsize=8)
def truth_digest(source: TruthSource) -> str:
    """A digest of the ground truth's files and described GPU speeds (read once per process
    for each source, as the truth itself is loaded once: `TruthSource.load`)."""
    return "\0".join([*(_files_digest(Path(f)) if f else "built-in"
                        for f in (source.profiles, source.catalog)),
                      *(str(s) for s in source.speeds)])


def _files_digest(path: Path) -> str:
    """A digest of a file, or of every file under a directory (names and contents; Python's
    byte-code caches left out)."""
    digest = hashlib.sha256()
    files = (sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
             if path.is_dir() else [path])
    for p in files:
        digest.update(str(p.relative_to(path) if path.is_dir() else p.name).encode())
        digest.update(p.read_bytes())
    return digest.hexdigest()


def workload_digest(workload: Workload) -> str:
    """A digest of a workload's name and every one of its jobs."""
    digest = hashlib.sha256(workload.name.encode())
    for job in workload.jobs:
        digest.update(repr(job).encode())
    return digest.hexdigest()


def cell_key(source: TruthSource, policy: str, overrides: dict[str, Any], workload: str,
             cluster: Cluster, config: EngineConfig) -> str:
    """The key of one cell, `workload` being its `workload_digest`: a digest of everything
    the cell's result depends on."""
    digest = hashlib.sha256()
    for part in (f"format {FORMAT}", code_digest(), policy,
                 json.dumps(overrides, sort_keys=True, default=str), workload, repr(cluster),
                 repr(config), truth_digest(source)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def result_doc(result: SimResult) -> dict[str, Any]:
    """A `SimResult` as JSON-ready values (`result_from_doc` reads it back exactly)."""
    doc = {f.name: getattr(result, f.name) for f in dataclasses.fields(SimResult)}
    doc["jobs"] = [dataclasses.astuple(job) for job in result.jobs]
    return doc


def result_from_doc(doc: dict[str, Any]) -> SimResult:
    """The `SimResult` of a `result_doc` (after a JSON round trip: lists back to tuples)."""
    fields = {f.name for f in dataclasses.fields(SimResult)}
    values = {k: v for k, v in doc.items() if k in fields}
    values["jobs"] = [JobRecord(*row) for row in doc["jobs"]]
    values["gpu_timeline"] = [(t, g) for t, g in doc["gpu_timeline"]]
    values["allocations"] = {name: [(t, g) for t, g in steps]
                             for name, steps in doc["allocations"].items()}
    return SimResult(**values)


class CellStore:
    """Cells kept under `root` (`corral simulate --out DIR` keeps them in DIR/cells)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str) -> SimResult | None:
        """The kept result of cell `key`, or None (never kept, or unreadable: run it again)."""
        try:
            doc = json.loads(self._path(key).read_text())
            if doc.get("format") != FORMAT:
                return None
            return result_from_doc(doc["result"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, result: SimResult) -> None:
        """Keep the result of cell `key` (written whole or not at all)."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self._path(key)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"format": FORMAT, "policy": result.policy,
                                   "workload": result.workload, "result": result_doc(result)}))
        os.replace(tmp, path)

    def prune(self, keep: set[str]) -> int:
        """Remove the cells (and the half-written files of interrupted runs) whose key is not in
        `keep`; returns how many cells went. A sweep's folder otherwise keeps every earlier
        run's cells, a whole simulation result each, however often its inputs changed."""
        removed = 0
        if not self.root.is_dir():
            return 0
        for path in self.root.iterdir():
            if path.stem in keep or not (path.suffix == ".json" or path.suffix.startswith(".tmp")):
                continue
            try:
                path.unlink()
            except OSError:
                continue
            removed += path.suffix == ".json"
        return removed
