"""`JobFiles`: a job's files under `<root>/jobs/<job id>/`, as the local and Ray backends keep them.

Its log (`job.log` for rank 0, `worker-<rank>.log` for the others; the executor's notes go to
rank 0's, timestamped), its report (corral.protocol.report), its checkpoints, the in-place
resize protocol's control files, and the current launch's worker ids and tag, recorded so that
a later service can reclaim workers this one leaves. Logs are never opened through a symbolic
link: a sandboxed job may replace its log with one, to make the service write, or read back,
another file.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from corral.protocol.files import atomic_write_json, read_json
from corral.protocol.report import REPORT_FILE, Report

__all__ = ["JobFiles", "WORKERS_FILE", "TAG_FILE"]

WORKERS_FILE = "workers.json"  # ids of the current launch's workers, for a later service to reclaim
TAG_FILE = "launch.tag"  # the current launch's tag (corral.executors.procs), where one is used
log = logging.getLogger("corral.executors")


class JobFiles:
    """Every job's files under `root`/jobs/ (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def dir(self, job_id: str) -> Path:
        path = self.root / "jobs" / job_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def control_dir(self, job_id: str) -> Path:
        """Where the in-place resize protocol's files live (corral.protocol.inplace)."""
        path = self.dir(job_id) / "control"
        path.mkdir(exist_ok=True)
        return path

    def checkpoint_dir(self, job_id: str) -> Path:
        return self.dir(job_id) / "checkpoints"

    def report_path(self, job_id: str) -> Path:
        return self.dir(job_id) / REPORT_FILE

    def report(self, job_id: str) -> Report | None:
        """Its latest report, typed; None when there is none or it is refused."""
        return Report.read(self.report_path(job_id))

    def log_path(self, job_id: str, rank: int) -> Path:
        return self.dir(job_id) / ("job.log" if rank == 0 else f"worker-{rank}.log")

    def open_log(self, job_id: str, rank: int) -> IO[bytes]:
        """Rank `rank`'s log, to append to; never through a symbolic link."""
        fd = os.open(self.log_path(job_id, rank),
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        return open(fd, "ab")

    def read_log(self, job_id: str, rank: int = 0, tail_bytes: int | None = None) -> str:
        try:
            fd = os.open(self.log_path(job_id, rank), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # none yet, or a link the job made in place of its log: not followed
            return ""
        with open(fd, "rb") as f:
            if tail_bytes is not None:
                f.seek(max(0, os.fstat(fd).st_size - tail_bytes))
            return f.read().decode(errors="replace")

    def note(self, job_id: str, text: str) -> None:
        """A line from the executor in the job's log."""
        try:
            with self.open_log(job_id, 0) as f:
                f.write(f"[corral {time.strftime('%H:%M:%S')}] {text}\n".encode())
        except OSError:  # a link the job made in place of its log: the note is not written
            log.warning("job %s: cannot write its log: %s", job_id, text)

    def record_workers(self, job_id: str, ids: Sequence[Any], tag: str | None = None) -> None:
        """Record the launch's worker ids (and its tag) before they can outlive this service."""
        if tag is not None:
            atomic_write_json(self.dir(job_id) / TAG_FILE, tag)
        atomic_write_json(self.dir(job_id) / WORKERS_FILE, list(ids))

    def recorded_workers(self, job_id: str) -> list[Any]:
        ids = read_json(self.dir(job_id) / WORKERS_FILE)
        return list(ids) if isinstance(ids, list) else []

    def recorded_tag(self, job_id: str) -> str | None:
        """The recorded launch tag, if it is one of this job's (the job can write the file:
        it must not name another job's tag, whose processes a reclaim would kill)."""
        tag = read_json(self.dir(job_id) / TAG_FILE)
        return tag if isinstance(tag, str) and tag.startswith(f"{job_id}.") else None
