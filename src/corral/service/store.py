"""The service's durable state, in SQLite: jobs, their assignments, events and telemetry.

Every change the loop makes is written before the next round, so a restarted service finds
every job (SideCar (SC'20) §III-B-1 keeps these tables in memory; here they survive a crash).
The API writes submissions and cancels here and the loop picks them up, so the two share no
Python objects. One connection, guarded by a lock, in WAL mode.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.core.errors import InputError
from corral.protocol.report import Report
from corral.service.records import launch_start
from corral.service.submission import safe_text

__all__ = ["AFTER_PATTERN", "JobFilter", "PageRow", "Store", "stored_active_queues"]

#: A cursor of a page: the id of a job (`job-N`, N its seq; `add_job` names them so).
AFTER_PATTERN = r"job-[0-9]{1,18}"
#: A row of a page of jobs: (id, summary JSON text or None, document where no summary).
PageRow = tuple[str, str | None, dict[str, Any] | None]


@dataclass(frozen=True)
class JobFilter:
    """Which submitted jobs a list shows: any of `statuses` (None: every status), in any of
    `queues` (None: every queue; a tenant's are always given), whose name contains `name`
    (case-sensitive; None: any name)."""

    statuses: frozenset[str] | None = None
    queues: frozenset[str] | None = None
    name: str | None = None

    def sql(self) -> tuple[str, list[Any]]:
        """The WHERE condition (over the indexed columns) and its arguments."""
        cond, args = ["status != 'new'"], []
        for column, values in (("status", self.statuses), ("queue", self.queues)):
            if values is not None:
                cond.append(f"{column} IN ({','.join('?' * len(values))})")
                args += sorted(values)
        if self.name:
            cond.append("instr(name, ?) > 0")
            args.append(self.name)
        return " AND ".join(cond), args

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    status TEXT NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    doc TEXT NOT NULL,
    summary TEXT
);
CREATE TABLE IF NOT EXISTS assignments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, time_s REAL NOT NULL,
    placement TEXT NOT NULL, num_gpus INTEGER NOT NULL, batch TEXT
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT, time_s REAL NOT NULL,
    kind TEXT NOT NULL, detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS telemetry (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, time_s REAL NOT NULL,
    launch INTEGER, world_size INTEGER, steps INTEGER, epoch INTEGER, progress REAL, loss REAL,
    local_bsz INTEGER, accum_steps INTEGER, total_bsz INTEGER, metric REAL, state TEXT,
    resumed_steps INTEGER, resumed_loss REAL, grad_sqr REAL, grad_var REAL, first_step_s REAL,
    launch_start TEXT, gpu_type TEXT
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
CREATE INDEX IF NOT EXISTS jobs_cancel ON jobs(cancel_requested) WHERE cancel_requested = 1;
CREATE INDEX IF NOT EXISTS telemetry_job ON telemetry(job_id);
"""


#: Columns added after the first release: databases made before get them on open.
_TELEMETRY_ADDED = {"grad_sqr": "REAL", "grad_var": "REAL", "first_step_s": "REAL",
                    "launch_start": "TEXT", "gpu_type": "TEXT"}
_JOBS_ADDED = {"summary": "TEXT", "queue": "TEXT", "name": "TEXT"}
#: Run at every open, once the columns above exist: the columns older databases lack filled
#: in (a job stored without a queue is in `default`; a name is its summary's, else its
#: submission's, else NULL, which no name filter matches), and the indexes GET /jobs pages
#: and filters by.
_JOBS_INDEXED = """
UPDATE jobs SET queue = 'default' WHERE queue IS NULL;
UPDATE jobs SET name = COALESCE(json_extract(summary, '$.name'),
                                json_extract(doc, '$.submission.name'))
    WHERE name IS NULL AND status != 'new';
CREATE INDEX IF NOT EXISTS jobs_queue_seq ON jobs(queue, seq);
CREATE INDEX IF NOT EXISTS jobs_status_seq ON jobs(status, seq);
"""
#: Jobs per (queue, status), kept by triggers in the database itself (so any writer keeps
#: them): GET /jobs's total without counting 100,000 rows at each call (23 ms for all jobs,
#: 200 ms for one tenant's queues, whose index has no status). Made, and filled from the jobs
#: already stored, on the first open by a version that has it.
_JOB_COUNTS = """
CREATE TABLE job_counts (queue TEXT NOT NULL, status TEXT NOT NULL, n INTEGER NOT NULL,
                         PRIMARY KEY (queue, status));
INSERT INTO job_counts SELECT COALESCE(queue, 'default'), status, COUNT(*) FROM jobs
    GROUP BY 1, 2;
CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO job_counts VALUES (COALESCE(NEW.queue, 'default'), NEW.status, 1)
        ON CONFLICT (queue, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER job_counts_update AFTER UPDATE OF status, queue ON jobs
    WHEN OLD.status IS NOT NEW.status OR OLD.queue IS NOT NEW.queue BEGIN
    UPDATE job_counts SET n = n - 1
        WHERE queue = COALESCE(OLD.queue, 'default') AND status = OLD.status;
    INSERT INTO job_counts VALUES (COALESCE(NEW.queue, 'default'), NEW.status, 1)
        ON CONFLICT (queue, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs BEGIN
    UPDATE job_counts SET n = n - 1
        WHERE queue = COALESCE(OLD.queue, 'default') AND status = OLD.status;
END;
"""


class Store:
    """Thread-safe access to the service database."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        self._origin: float | None = None
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self._add_missing_columns("telemetry", _TELEMETRY_ADDED)
            self._add_missing_columns("jobs", _JOBS_ADDED)
            self._db.executescript(_JOBS_INDEXED)
            if not self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                    "name = 'job_counts'").fetchall():
                self._db.executescript(f"BEGIN; {_JOB_COUNTS} COMMIT;")

    def _add_missing_columns(self, table: str, columns: dict[str, str]) -> None:
        have = {row["name"] for row in self._db.execute(f"PRAGMA table_info({table})")}
        for name, kind in columns.items():
            if name not in have:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _exec(self, sql: str, args: Iterable[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, tuple(args)).fetchall()

    # -- meta -----------------------------------------------------------------------------
    def meta(self, key: str, default: str | None = None) -> str | None:
        rows = self._exec("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0]["value"] if rows else default

    def set_meta(self, key: str, value: str) -> None:
        self._exec("INSERT INTO meta(key, value) VALUES(?, ?) "
                   "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    def origin(self, clock: Callable[[], float] = time.time) -> float:
        """The time on the service's `clock` that is its t = 0 (fixed on first start: its
        reading then; read once, since every stored report converts its times with it)."""
        if self._origin is None:
            value = self.meta("origin")
            if value is None:
                value = repr(clock())
                self.set_meta("origin", value)
            self._origin = float(value)
        return self._origin

    # -- jobs -----------------------------------------------------------------------------
    def add_job(self, make: Callable[[str], tuple[dict[str, Any], str | None]]
                ) -> dict[str, Any]:
        """Insert a job whose document and summary (JSON text) `make(job_id)` builds; returns
        the document."""
        with self._lock:
            cur = self._db.execute("INSERT INTO jobs(id, status, doc) VALUES('', 'new', '{}')")
            job_id = f"job-{cur.lastrowid}"
            doc, summary = make(job_id)
            queue = (doc.get("submission") or {}).get("queue") or "default"
            self._db.execute("UPDATE jobs SET id = ?, status = ?, doc = ?, summary = ?, "
                             "queue = ?, name = json_extract(?, '$.name') WHERE seq = ?",
                             (job_id, doc["status"], json.dumps(doc), summary, queue, summary,
                              cur.lastrowid))
        return doc

    def save_job(self, doc: dict[str, Any], summary: str | None = None) -> None:
        self.save_jobs([(doc, summary)])

    def save_jobs(self, records: Iterable[tuple[dict[str, Any], str | None]]) -> None:
        """Update stored jobs - (document, summary as JSON text or None: made from the
        document when listed) - in one transaction (one commit for thousands of active jobs,
        not one each)."""
        self._exec_many("UPDATE jobs SET status = ?, doc = ?, summary = ? WHERE id = ?",
                        [(d["status"], json.dumps(d), summary, d["id"]) for d, summary in records])

    def _exec_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """`sql` for every row, in one transaction."""
        if not rows:
            return
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany(sql, rows)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def job(self, job_id: str) -> dict[str, Any] | None:
        rows = self._exec("SELECT doc FROM jobs WHERE id = ?", (job_id,))
        return json.loads(rows[0]["doc"]) if rows else None

    def jobs(self, statuses: Iterable[str] | None = None) -> list[dict[str, Any]]:
        if statuses is None:
            rows = self._exec("SELECT doc FROM jobs WHERE status != 'new' ORDER BY seq")
        else:
            st = list(statuses)
            rows = self._exec(f"SELECT doc FROM jobs WHERE status IN ({','.join('?' * len(st))}) "
                              "ORDER BY seq", st)
        return [json.loads(r["doc"]) for r in rows]

    def job_page(self, where: JobFilter, after: str | None = None, limit: int = 100,
                 newest_first: bool = False) -> tuple[list[PageRow], int]:
        """One page of GET /jobs: (id, summary JSON text, document) of at most `limit` jobs
        that `where` matches, after the job `after` (an id; None: from the start) in the order
        asked (oldest first, or newest), and how many jobs match in all. The document is read
        only where no summary was stored. Indexed (`WHERE seq > ? ... LIMIT`), so a page costs
        the same at 100,000 jobs as at 100; the count reads an index, not the documents.
        `after` is read as the cursor it is (`job-N`, as `add_job` names jobs; AFTER_PATTERN),
        so a job id no longer listed, or never stored, still pages on."""
        matched, matched_args = where.sql()
        cond, args = matched, list(matched_args)
        if after is not None:
            if not re.fullmatch(AFTER_PATTERN, after):
                raise InputError(f"after: '{safe_text(after, 80)}' is not a job id (job-N)")
            cond += " AND seq < ?" if newest_first else " AND seq > ?"
            args.append(int(after[len("job-"):]))
        order = "DESC" if newest_first else "ASC"
        with self._lock:
            rows = self._db.execute(
                "SELECT id, summary, CASE WHEN summary IS NULL THEN doc END AS doc FROM jobs "
                f"WHERE {cond} ORDER BY seq {order} LIMIT ?", (*args, limit)).fetchall()
            total = self._total(where)
        return [(r["id"], r["summary"], None if r["doc"] is None else json.loads(r["doc"]))
                for r in rows], total

    def _total(self, where: JobFilter) -> int:
        """How many jobs `where` matches: from the kept counts (`_JOB_COUNTS`), or, with a
        name to match, by counting the jobs (the caller holds the lock)."""
        matched, args = where.sql()
        if where.name:
            return int(self._db.execute(f"SELECT COUNT(*) FROM jobs WHERE {matched}",
                                        args).fetchone()[0])
        return int(self._db.execute(f"SELECT COALESCE(SUM(n), 0) FROM job_counts "
                                    f"WHERE {matched}", args).fetchone()[0])

    def status_counts(self) -> dict[str, int]:
        """Jobs per status (submitted ones: not 'new'), without reading their documents."""
        rows = self._exec("SELECT status, SUM(n) AS n FROM job_counts WHERE status != 'new' "
                          "AND n > 0 GROUP BY status")
        return {r["status"]: r["n"] for r in rows}

    def active_by_queue(self) -> dict[str, list[str]]:
        """{queue: ids of its active jobs} (a job stored without a queue: `default`)."""
        rows = self._exec("SELECT id, COALESCE(queue, 'default') AS queue FROM jobs "
                          "WHERE status IN ('queued', 'running') ORDER BY seq")
        out: dict[str, list[str]] = {}
        for r in rows:
            out.setdefault(r["queue"], []).append(r["id"])
        return out

    def jobs_after(self, seq: int, limit: int = -1, statuses: Iterable[str] | None = None
                   ) -> list[tuple[int, dict[str, Any]]]:
        """(seq, document) of jobs submitted after `seq`, oldest first (at most `limit`), of
        `statuses` only when given."""
        if statuses is None:
            rows = self._exec("SELECT seq, doc FROM jobs WHERE seq > ? AND status != 'new' "
                              "ORDER BY seq LIMIT ?", (seq, limit))
        else:
            st = list(statuses)
            rows = self._exec(f"SELECT seq, doc FROM jobs WHERE seq > ? AND status IN "
                              f"({','.join('?' * len(st))}) ORDER BY seq LIMIT ?",
                              (seq, *st, limit))
        return [(r["seq"], json.loads(r["doc"])) for r in rows]

    def last_seq(self) -> int:
        """The sequence number of the last job stored (0 for none)."""
        rows = self._exec("SELECT MAX(seq) AS seq FROM jobs WHERE status != 'new'")
        return int(rows[0]["seq"] or 0)

    def request_cancel(self, job_id: str) -> bool:
        with self._lock:
            cur = self._db.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))
            return cur.rowcount > 0

    def cancel_requests(self) -> list[str]:
        rows = self._exec("SELECT id FROM jobs WHERE cancel_requested = 1 "
                          "AND status IN ('queued', 'running')")
        return [r["id"] for r in rows]

    # -- history --------------------------------------------------------------------------
    def add_event(self, time_s: float, job_id: str | None, kind: str, detail: str = "") -> None:
        self._exec("INSERT INTO events(job_id, time_s, kind, detail) VALUES(?, ?, ?, ?)",
                   (job_id, time_s, kind, detail))

    def events(self, job_id: str | None = None) -> list[dict[str, Any]]:
        if job_id is None:
            rows = self._exec("SELECT * FROM events ORDER BY seq")
        else:
            rows = self._exec("SELECT * FROM events WHERE job_id = ? ORDER BY seq", (job_id,))
        return [dict(r) for r in rows]

    def service_events(self, kind: str, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` events of `kind` that belong to no job (e.g. `queues-changed`),
        oldest first (the job index finds them: a job id of NULL is indexed too)."""
        rows = self._exec("SELECT * FROM events WHERE job_id IS NULL AND kind = ? "
                          "ORDER BY seq DESC LIMIT ?", (kind, limit))
        return [dict(r) for r in reversed(list(rows))]

    def add_assignment(self, time_s: float, job_id: str, placement: str, num_gpus: int,
                       batch: str | None) -> None:
        self._exec("INSERT INTO assignments(job_id, time_s, placement, num_gpus, batch) "
                   "VALUES(?, ?, ?, ?, ?)", (job_id, time_s, placement, num_gpus, batch))

    def assignments(self, job_id: str) -> list[dict[str, Any]]:
        rows = self._exec("SELECT * FROM assignments WHERE job_id = ? ORDER BY seq", (job_id,))
        return [dict(r) for r in rows]

    def add_telemetry(self, time_s: float, job_id: str, report: Report) -> None:
        """One report of a job: progress, batch, loss, gradient statistics and, for the replay
        in the simulator (corral.sim.analysis.measured_run), when its launch took its first step,
        and how its launch started (`launch_start`: corral.service.records.LaunchStart; NULL in
        rows an older service stored), and the GPU type it reported running on (`gpu_type`;
        NULL where it said none)."""
        self.add_telemetry_rows([(time_s, job_id, report)])

    def add_telemetry_rows(self, rows: Iterable[tuple[float, str, Report]]) -> None:
        """(time_s, job_id, report) of many reports (`add_telemetry`), in one transaction:
        the control loop writes a tick's reports together, not a commit each."""
        origin = self.origin()

        def row(time_s: float, job_id: str, report: Report) -> tuple[Any, ...]:
            batch = report.batch or (None, None)
            metrics = report.metrics
            resumed = report.resumed or {}
            grad = (report.estimator or {}).get("grad") or {}
            first = report.first_step_time
            return (job_id, time_s, report.launch, report.world_size,
                    report.steps, report.epoch, report.progress,
                    report.loss, batch[0], batch[1], report.total_bsz,
                    metrics[-1][2] if metrics else None, report.state,
                    resumed.get("steps"), resumed.get("loss"), grad.get("sqr"), grad.get("var"),
                    None if first is None else first - origin,
                    launch_start(report.resumed).value, report.gpu_type)

        self._exec_many(
            "INSERT INTO telemetry(job_id, time_s, launch, world_size, steps, epoch, progress, "
            "loss, local_bsz, accum_steps, total_bsz, metric, state, resumed_steps, resumed_loss, "
            "grad_sqr, grad_var, first_step_s, launch_start, gpu_type) "
            "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [row(*r) for r in rows])

    def telemetry(self, job_id: str) -> list[dict[str, Any]]:
        rows = self._exec("SELECT * FROM telemetry WHERE job_id = ? ORDER BY seq", (job_id,))
        return [dict(r) for r in rows]


def stored_active_queues(path: Path) -> dict[str, list[str]]:
    """{queue: active job ids} of the database at `path`, read only (nothing when there is
    none): `corral serve --queues` checks them before it writes anything."""
    if not path.is_file():
        return {}
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return {}
    try:
        rows = db.execute("SELECT id, COALESCE(queue, 'default') FROM jobs "
                          "WHERE status IN ('queued', 'running') ORDER BY seq").fetchall()
    except sqlite3.OperationalError as exc:  # an older database: no queue column: default
        try:
            rows = [(r[0], "default") for r in db.execute(
                "SELECT id FROM jobs WHERE status IN ('queued', 'running')").fetchall()] \
                if "no such column" in str(exc) else []
        except sqlite3.Error:
            rows = []
    finally:
        db.close()
    out: dict[str, list[str]] = {}
    for job_id, queue in rows:
        out.setdefault(queue, []).append(job_id)
    return out
