"""`CheckpointFile`: every emulated job's latest checkpoint, in one SQLite file.

On a clock thousands of times real time a file per checkpoint would be thousands of writes a
second, so periodic checkpoints are batched (one transaction at most once a real second);
those that start or end a launch are written at once. A row holds the job's latest training
state as JSON and its launch; its `seq` keeps a save from replacing a row with an older one.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["CheckpointFile", "CHECKPOINT_DB"]

CHECKPOINT_DB = "emulated-checkpoints.db"  # in the executor's data directory


class CheckpointFile:
    """Job id -> its latest checkpoint (a JSON-safe dict); safe to use from any thread."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS checkpoints "
                         "(job_id TEXT PRIMARY KEY, state TEXT NOT NULL, "
                         "seq INTEGER NOT NULL DEFAULT 0)")
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(checkpoints)")}
        if "seq" not in columns:  # a file written before rows were numbered
            self._db.execute("ALTER TABLE checkpoints ADD COLUMN seq INTEGER NOT NULL DEFAULT 0")

    def last_seq(self) -> int:
        """The highest sequence number saved (0 when none): a new writer numbers on from it."""
        with self._lock:
            row = self._db.execute("SELECT MAX(seq) FROM checkpoints").fetchone()
        return int(row[0] or 0)

    def load(self, job_id: str) -> dict[str, Any] | None:
        """The job's latest saved checkpoint; None when it has none (or it is unreadable)."""
        with self._lock:
            row = self._db.execute("SELECT state FROM checkpoints WHERE job_id = ?",
                                   (job_id,)).fetchone()
        try:
            return json.loads(row[0]) if row is not None else None
        except ValueError:
            return None

    def save(self, states: Mapping[str, tuple[int, Mapping[str, Any]]]) -> None:
        """Write these jobs' checkpoints, job id -> (sequence number, state), in one
        transaction; each replaces the job's row unless that row is newer (a higher number)."""
        if not states:
            return
        rows = [(job_id, json.dumps(state, separators=(",", ":")), seq)
                for job_id, (seq, state) in states.items()]
        with self._lock:
            with self._db:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT INTO checkpoints(job_id, state, seq) VALUES(?, ?, ?) "
                                     "ON CONFLICT(job_id) DO UPDATE SET state = excluded.state, "
                                     "seq = excluded.seq WHERE excluded.seq >= checkpoints.seq",
                                     rows)

    def close(self) -> None:
        with self._lock:
            self._db.close()
