"""The store's kept job counts (`job_counts`, maintained by triggers): GET /jobs's total without
counting every row, equal to a count of the rows after any sequence of writes, and filled on
the first open of a database made before it."""

from __future__ import annotations

import random
import sqlite3

from loopkit import submit  # noqa: E402  (tests/service is on sys.path)

from corral.service.store import JobFilter, Store

STATUSES = ("queued", "running", "done", "failed", "cancelled")


def _counted(store: Store, where: JobFilter) -> int:
    matched, args = where.sql()
    return store._exec(f"SELECT COUNT(*) AS n FROM jobs WHERE {matched}", args)[0]["n"]


def _filters() -> list[JobFilter]:
    out = [JobFilter()]
    for queues in (None, frozenset({"a"}), frozenset({"a", "b"}), frozenset({"nobody"})):
        for statuses in (None, frozenset({"done"}), frozenset({"queued", "running"})):
            out.append(JobFilter(statuses=statuses, queues=queues))
    return out


def test_the_kept_counts_equal_a_count_of_the_rows_after_any_writes(tmp_path) -> None:
    store = Store(tmp_path / "state.db")
    rng = random.Random(7)
    ids = [submit(store, 100.0, queue=rng.choice(["a", "b", None])) for _ in range(40)]
    for _ in range(200):
        doc = store.job(rng.choice(ids))
        store.save_job({**doc, "status": rng.choice(STATUSES)})
    store._exec("DELETE FROM jobs WHERE id = ?", (ids[0],))
    for where in _filters():
        assert store.job_page(where, limit=0)[1] == _counted(store, where), where
    assert sum(store.status_counts().values()) == 39
    # with a name to match, the rows are counted
    named = JobFilter(name="train")
    assert store.job_page(named, limit=0)[1] == _counted(store, named)


def test_a_database_made_before_the_counts_gets_them_filled_on_open(tmp_path) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    for queue, status in (("a", "done"), ("a", "queued"), ("b", "done")):
        doc = store.job(submit(store, 100.0, queue=queue))
        store.save_job({**doc, "status": status})
    store.close()
    db = sqlite3.connect(path)  # as an older version left it: no table, no triggers
    db.executescript("DROP TRIGGER job_counts_insert; DROP TRIGGER job_counts_update; "
                     "DROP TRIGGER job_counts_delete; DROP TABLE job_counts;")
    db.close()
    store = Store(path)
    assert store.job_page(JobFilter(queues=frozenset({"a"})), limit=0)[1] == 2
    assert store.status_counts() == {"done": 2, "queued": 1}
    submit(store, 101.0, queue="b")
    assert store.job_page(JobFilter(queues=frozenset({"b"})), limit=0)[1] == 2
