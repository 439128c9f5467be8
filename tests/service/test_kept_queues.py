"""The tree `PUT /queues` set survives a restart (issue 36): kept in DATA_DIR, in force again
while the `--queues` file is unchanged, superseded by an edited file, and a stored file that
cannot be used falls back to the file with one log line. In-process, over the fake executor,
started as `corral serve` starts (corral.service.server); the real process:
test_kept_queues_live.py."""

from __future__ import annotations

import logging
import stat
import warnings
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient  # noqa: E402

from corral.core.queues import parse_queues  # noqa: E402
from corral.policies import create_policy  # noqa: E402
from corral.policies.tenancy import QueuedPolicy  # noqa: E402
from corral.service.api import create_app  # noqa: E402
from corral.service.kept_queues import (  # noqa: E402
    STORED,
    SUPERSEDED,
    UNREADABLE,
    KeptQueues,
    tree_sha256,
)
from corral.service.loop import ControlLoop  # noqa: E402
from corral.service.store import Store  # noqa: E402
from corral.service.tenants import Tenancy  # noqa: E402

ADMIN = {"Authorization": "Bearer admin-s3cret"}
QUEUES = "[queue.a]\nquota = 1\n[queue.b]\nquota = 1\n[queue.prod]\nquota = 2\n"
# prod's quota halved with a limit, ops added, b removed
CHANGED = "[queue.a]\nquota = 1\n[queue.prod]\nquota = 1\nlimit = 3\n[queue.ops]\nquota = 1\n"
JOB = {"command": ["python", "train.py"]}


class Service:
    """One start of the service on `directory` with `file_text` as its --queues file."""

    def __init__(self, directory: Path, executor, file_text: str = QUEUES) -> None:
        self.dir = directory
        self.store = Store(directory / "state.db")
        self.kept = KeptQueues(directory, parse_queues(file_text, "queues.toml", 4))
        self.start = self.kept.choose(4)
        self.policy = QueuedPolicy(lambda: create_policy("fifo"), self.start.tree)
        self.loop = ControlLoop(self.store, executor, self.policy, interval_s=1)
        self.tenancy = Tenancy.start(directory, self.store, self.start.tree)
        self.kept.apply(self.start, self.store, self.loop.now_s())
        self.client = TestClient(create_app(self.store, executor, self.loop, "admin-s3cret",
                                            tenancy=self.tenancy, data_dir=directory,
                                            kept=self.kept))

    def token(self, queue: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {(self.dir / 'tokens' / queue).read_text().strip()}"}

    def quotas(self) -> dict[str, int]:
        resp = self.client.get("/queues", headers=ADMIN)
        assert resp.status_code == 200, resp.text
        return {q["name"]: q["quota"] for q in resp.json()["queues"]}

    def events(self, kind: str) -> list[str]:
        return [e["detail"] for e in self.store.events() if e["kind"] == kind]

    def close(self) -> None:
        self.client.close()
        self.store.close()


def one_line(resp) -> str:
    detail = resp.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and "Traceback" not in detail
    return detail


def test_a_put_tree_is_kept_and_the_next_start_runs_it(tmp_path: Path, fake_executor,
                                                       caplog) -> None:
    s = Service(tmp_path, fake_executor)
    assert s.start.event is None and not (tmp_path / STORED).exists()
    b_token = s.token("b")
    resp = s.client.put("/queues?drop_queues=true", headers=ADMIN, content=CHANGED.encode())
    assert resp.status_code == 200, resp.text
    stored = tmp_path / STORED
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    text = stored.read_text()
    assert f"# replaces: sha256:{tree_sha256(parse_queues(QUEUES, 'queues.toml'))}" in text
    assert parse_queues(text, "PUT /queues") == s.tenancy.tree  # readable, and the same tree
    ops = s.token("ops")
    s.close()

    with caplog.at_level(logging.INFO, logger="corral.service"):
        s = Service(tmp_path, fake_executor)  # the same --queues file: the stored tree wins
    try:
        assert s.quotas() == {"a": 1, "prod": 1, "ops": 1, "default": 0}
        assert s.policy.queues == s.tenancy.tree and s.policy.queues["prod"].any_limit == 3
        [detail] = s.events("queues-restored")
        assert "is in force, not queues.toml (unchanged since)" in detail
        assert "prod: quota 2->1, limit None->3" in detail and "-b" in detail
        assert [r.getMessage() for r in caplog.records] == [detail]
        assert s.client.get("/jobs", headers=ops).status_code == 200  # added by PUT: kept
        assert s.client.post("/jobs", headers=ops, json=JOB).status_code == 201
        assert s.client.get("/jobs", headers=s.token("a")).status_code == 200
        assert s.client.get("/jobs", headers=b_token).status_code == 401  # removed by PUT
        assert s.client.post("/jobs", headers=b_token, json=JOB).status_code == 401
        assert stored.exists()  # still the tree in force for the start after
    finally:
        s.close()


def test_refused_puts_keep_nothing(tmp_path: Path, fake_executor) -> None:
    s = Service(tmp_path, fake_executor)
    try:
        bad = QUEUES.replace("quota = 2", "quota = 9")
        resp = s.client.put("/queues", headers=ADMIN, content=bad.encode())
        assert resp.status_code == 400 and "exceeds the cluster" in one_line(resp)
        resp = s.client.put("/queues", headers=s.token("a"), content=CHANGED.encode())
        assert resp.status_code == 403
        assert not (tmp_path / STORED).exists()
        assert s.client.put("/queues?drop_queues=true", headers=ADMIN, content=CHANGED.encode()).status_code == 200
        before = (tmp_path / STORED).read_bytes()
        for text in (bad, "[queue.a\n", "[queue.a]\nqouta = 1\n"):
            resp = s.client.put("/queues", headers=ADMIN, content=text.encode())
            assert resp.status_code == 400, resp.text
        assert (tmp_path / STORED).read_bytes() == before
    finally:
        s.close()


def test_a_tree_that_cannot_be_kept_is_not_put_in_force(tmp_path: Path, fake_executor,
                                                        monkeypatch) -> None:
    s = Service(tmp_path, fake_executor)
    try:
        before = s.policy.queues

        def full(tree) -> None:
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(s.kept, "save", full)
        resp = s.client.put("/queues?drop_queues=true", headers=ADMIN, content=CHANGED.encode())
        assert resp.status_code == 500
        assert one_line(resp) == (f"PUT /queues: cannot keep the new tree in DATA_DIR/{STORED} "
                                  "(No space left on device): the old one stays")
        assert s.policy.queues is before and s.tenancy.tree is before
        assert s.events("queues-changed") == [] and not (tmp_path / "tokens" / "ops").exists()
    finally:
        s.close()


def test_a_queues_file_edited_since_wins_and_the_stored_tree_is_set_aside(
        tmp_path: Path, fake_executor, caplog) -> None:
    s = Service(tmp_path, fake_executor)
    assert s.client.put("/queues?drop_queues=true", headers=ADMIN, content=CHANGED.encode()).status_code == 200
    stored_text = (tmp_path / STORED).read_text()
    s.close()
    # comments and layout are no edit: the stored tree still wins
    s = Service(tmp_path, fake_executor, "# our teams\n" + QUEUES.replace("\n[", "\n\n["))
    assert s.start.event == "queues-restored" and s.quotas()["prod"] == 1
    s.close()

    edited = "[queue.a]\nquota = 2\n[queue.b]\nquota = 1\n[queue.prod]\nquota = 1\n"
    with caplog.at_level(logging.INFO, logger="corral.service"):
        s = Service(tmp_path, fake_executor, edited)
    try:
        assert s.quotas() == {"a": 2, "b": 1, "prod": 1, "default": 0}
        [detail] = s.events("queues-superseded")
        assert detail.startswith("queues.toml has changed since PUT /queues set the stored tree")
        assert f"the stored one is kept as {SUPERSEDED}" in detail
        assert "(from the stored tree: +b (quota 1); -ops; a: quota 1->2; prod: limit 3->None)" \
            in detail
        assert [r.getMessage() for r in caplog.records] == [detail]
        assert not (tmp_path / STORED).exists()
        assert (tmp_path / SUPERSEDED).read_text() == stored_text  # nothing lost
        assert s.client.get("/jobs", headers=s.token("b")).status_code == 200
    finally:
        s.close()
    s = Service(tmp_path, fake_executor, edited)  # said once: the next start is a plain one
    assert s.start.event is None and s.events("queues-superseded") == [detail]
    assert s.client.put("/queues?drop_queues=true", headers=ADMIN, content=CHANGED.encode()).status_code == 200
    s.close()
    s = Service(tmp_path, fake_executor, QUEUES)  # superseded again: the older one stays
    assert s.events("queues-superseded")[-1].endswith(f"kept as {SUPERSEDED[:-5]}.1.toml")
    assert (tmp_path / SUPERSEDED).read_text() == stored_text
    assert "# start it is in force instead of the --queues file queues.toml" in \
        (tmp_path / f"{SUPERSEDED[:-5]}.1.toml").read_text()
    s.close()


HEADER = "# replaces: sha256:{}\n"


@pytest.mark.parametrize("body, words", [
    ("[queue.a\n", "not valid TOML"),
    ("[queue.a]\nquota = 1\n", "no '# replaces: sha256:...' line"),
    (HEADER + "[queue.a]\nquota = 9\n", "exceeds the cluster's 4 GPUs"),
    (HEADER + "[queue.a]\nqouta = 1\n", "unknown key 'qouta'"),
    (HEADER + '[queue."a b"]\nquota = 1\n', "a live queue's name is 1 to 64"),
    (b"\xff\xfe[queue.a]\n", "cannot read it"),
])
def test_a_stored_tree_that_cannot_be_used_falls_back_to_the_file_in_one_line(
        tmp_path: Path, fake_executor, caplog, body: str | bytes, words: str) -> None:
    base = tree_sha256(parse_queues(QUEUES, "queues.toml"))
    data = body if isinstance(body, bytes) else body.format(base).encode()
    (tmp_path / STORED).write_bytes(data)
    with caplog.at_level(logging.INFO, logger="corral.service"):
        s = Service(tmp_path, fake_executor)
    try:
        assert s.quotas() == {"a": 1, "b": 1, "prod": 2, "default": 0}
        [line] = [r.getMessage() for r in caplog.records]
        assert caplog.records[0].levelno == logging.WARNING
        assert line.startswith(f"the stored queue tree cannot be used ({STORED}: ")
        assert words in line and "\n" not in line
        assert line.endswith(f"queues.toml is in force; the stored one is kept as {UNREADABLE}")
        assert s.events("queues-unreadable") == [line]
        assert (tmp_path / UNREADABLE).read_bytes() == data and not (tmp_path / STORED).exists()
        # the service works on: a PUT keeps its tree again
        assert s.client.put("/queues?drop_queues=true", headers=ADMIN, content=CHANGED.encode()).status_code == 200
        assert parse_queues((tmp_path / STORED).read_text(), "x").quota("prod") == 1
    finally:
        s.close()


def test_choosing_the_tree_changes_no_file(tmp_path: Path, fake_executor) -> None:
    """`corral serve` chooses before its last checks: a start refused after that (a queue with
    active jobs gone from the file, say) must leave the stored tree where it was."""
    s = Service(tmp_path, fake_executor)
    assert s.client.put("/queues?drop_queues=true", headers=ADMIN, content=CHANGED.encode()).status_code == 200
    s.close()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    for text in (QUEUES, QUEUES + "[queue.x]\n"):
        start = KeptQueues(tmp_path, parse_queues(text, "queues.toml", 4)).choose(4)
        assert start.event in ("queues-restored", "queues-superseded")
    (tmp_path / STORED).write_text("junk [")
    before[STORED] = b"junk ["
    assert KeptQueues(tmp_path, parse_queues(QUEUES, "q", 4)).choose(4).event == \
        "queues-unreadable"
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
