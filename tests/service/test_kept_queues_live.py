"""A real `corral serve --queues` restarted (issue 36): the admin's `PUT /queues` survives a
SIGTERM and restart (its new queue's token works, its removed queue's token is refused), a
`--queues` file edited between runs wins, and a corrupt stored tree is one log line. Four
starts of a 4-slot fifo service; pytest's timeout (300 s) guards against a hang."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("uvicorn")

import livecluster as live  # noqa: E402  (tests/service is on sys.path: conftest.py)

from corral.core.errors import CorralError  # noqa: E402
from corral.service.client import Client  # noqa: E402
from corral.service.kept_queues import STORED, SUPERSEDED, UNREADABLE  # noqa: E402
from corral.service.store import Store  # noqa: E402

QUEUES = "[queue.a]\nquota = 1\n[queue.b]\nquota = 1\n[queue.prod]\nquota = 2\n"
CHANGED = "[queue.a]\nquota = 1\n[queue.prod]\nquota = 1\nlimit = 3\n[queue.ops]\nquota = 1\n"
EDITED = "[queue.a]\nquota = 2\n[queue.b]\nquota = 1\n[queue.prod]\nquota = 1\n"


def quotas(client: Client) -> dict[str, int]:
    return {q["name"]: q["quota"] for q in client.queues()["queues"]}


@pytest.mark.slow
def test_a_quota_change_survives_a_restart_an_edited_file_wins(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    file = tmp_path / "queues.toml"
    file.write_text(QUEUES)
    svc = live.LiveService(home, "fifo", slots=4, interval_s=1,
                           extra_args=("--queues", str(file)))
    log = home / "service.log"

    def log_since(mark: int) -> str:
        return log.read_text()[mark:]

    def token(queue: str) -> str:
        return (home / "tokens" / queue).read_text().strip()

    try:
        svc.start()
        b = token("b")
        done = svc.client.put_queues(CHANGED, drop=True)
        assert done["new_tokens"] == ["tokens/ops"]
        assert (home / STORED).is_file()
        svc.close()

        mark = len(log.read_text())
        svc.start()  # the same file: the admin's change is in force again
        assert quotas(svc.client) == {"a": 1, "prod": 1, "ops": 1, "default": 0}
        with Client(svc.client.url, token("ops"), timeout_s=20) as ops:
            assert [q["name"] for q in ops.queues()["queues"]] == ["ops"]
            assert ops.jobs() == []
        with Client(svc.client.url, b, timeout_s=20) as gone:
            with pytest.raises(CorralError, match="missing or wrong bearer token"):
                gone.jobs()
        assert "is in force, not queues.toml (unchanged since)" in log_since(mark)
        svc.close()

        file.write_text(EDITED)  # the operator edits the file between runs: it wins
        mark = len(log.read_text())
        svc.start()
        assert quotas(svc.client) == {"a": 2, "b": 1, "prod": 1, "default": 0}
        assert "queues.toml has changed since PUT /queues" in log_since(mark)
        assert (home / SUPERSEDED).is_file() and not (home / STORED).exists()
        with Client(svc.client.url, b, timeout_s=20) as back:
            assert back.jobs() == []  # b is in the tree again: its kept token works
        svc.close()

        (home / STORED).write_text("[queue.a\nquota = ")  # a stored tree cut short
        mark = len(log.read_text())
        svc.start()
        assert quotas(svc.client) == {"a": 2, "b": 1, "prod": 1, "default": 0}
        lines = [ln for ln in log_since(mark).splitlines() if "stored queue tree" in ln]
        assert len(lines) == 1 and "not valid TOML" in lines[0], log_since(mark)
        assert "Traceback" not in log.read_text()
        assert (home / UNREADABLE).is_file()
    finally:
        svc.close()
    store = Store(home / "state.db")
    try:
        kinds = [e["kind"] for e in store.events() if e["kind"].startswith("queues-")]
    finally:
        store.close()
    assert kinds == ["queues-changed", "queues-restored", "queues-superseded",
                     "queues-unreadable"]
