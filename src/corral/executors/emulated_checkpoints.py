"""`CheckpointFile`: every emulated job's latest checkpoint, in one SQLite file.

The emulated executor's jobs checkpoint their training as real jobs do (corral.executors.
emulated), but on a clock up to thousands of times real time: a file per job and checkpoint
would be thousands of writes a real second on a large emulated cluster. So checkpoints are
collected in memory and written together, one transaction at most once a real second
(`EmulatedExecutor` calls `save` from its background thread); a job's row holds its latest
training state as JSON. A service killed with SIGKILL loses what was collected since the last
write, at most one real second's checkpoints, besides what its jobs trained since their last
checkpoint.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any, Mapping

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
                         "(job_id TEXT PRIMARY KEY, state TEXT NOT NULL)")

    def load(self, job_id: str) -> dict[str, Any] | None:
        """The job's latest saved checkpoint; None when it has none (or it is unreadable)."""
        with self._lock:
            row = self._db.execute("SELECT state FROM checkpoints WHERE job_id = ?",
                                   (job_id,)).fetchone()
        try:
            return json.loads(row[0]) if row is not None else None
        except ValueError:
            return None

    def save(self, states: Mapping[str, Mapping[str, Any]]) -> None:
        """Write these jobs' checkpoints, replacing their previous ones, in one transaction."""
        if not states:
            return
        rows = [(job_id, json.dumps(state, separators=(",", ":")))
                for job_id, state in states.items()]
        with self._lock:
            with self._db:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT INTO checkpoints(job_id, state) VALUES(?, ?) "
                                     "ON CONFLICT(job_id) DO UPDATE SET state = excluded.state",
                                     rows)

    def close(self) -> None:
        with self._lock:
            self._db.close()
