"""Quotas per GPU type in the live service: PUT /queues takes them and checks each type against
the cluster (and so does the next start, of the tree it kept), GET /queues shows them per type,
/metrics has a gauge by queue and GPU type, and the loop places each queue's jobs on the types
it is owed."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient  # noqa: E402

from fakes import FakeExecutor  # noqa: E402

from corral.core.cluster import Cluster  # noqa: E402
from corral.core.queues import parse_queues, type_capacity  # noqa: E402
from corral.policies import create_policy  # noqa: E402
from corral.policies.tenancy import QueuedPolicy  # noqa: E402
from corral.service.api import create_app  # noqa: E402
from corral.service.kept_queues import KeptQueues  # noqa: E402
from corral.service.loop import ControlLoop  # noqa: E402
from corral.service.store import Store  # noqa: E402
from corral.service.tenants import Tenancy  # noqa: E402

ADMIN = {"Authorization": "Bearer admin-s3cret"}
MIXED = Cluster.parse("k80:1x2,v100:1x2")
TYPED = "[queue.a]\nquota = { v100 = 2 }\n[queue.b]\nquota = { k80 = 2 }\nlimit = { v100 = 0 }\n"


class TypedExecutor(FakeExecutor):
    """The fake executor on two nodes of two GPU types."""

    def cluster(self) -> Cluster:
        return MIXED


@pytest.fixture
def client(tmp_path: Path):
    store = Store(tmp_path / "state.db")
    tree = parse_queues(TYPED, "queues.toml", MIXED.total_gpus, type_capacity(MIXED))
    policy = QueuedPolicy(lambda: create_policy("fifo"), tree)
    executor = TypedExecutor()
    loop = ControlLoop(store, executor, policy, interval_s=1)
    app = create_app(store, executor, loop, "admin-s3cret", stall_after_s=30,
                     tenancy=Tenancy.start(tmp_path, store, tree), data_dir=tmp_path,
                     kept=KeptQueues(tmp_path, tree))
    with TestClient(app) as c:
        c.loop, c.dir = loop, tmp_path  # type: ignore[attr-defined]
        yield c
    store.close()


def test_typed_quotas_are_shown_per_type_and_each_queue_runs_on_its_types(client) -> None:
    def submit(queue: str) -> str:
        token = (client.dir / "tokens" / queue).read_text().strip()
        resp = client.post("/jobs", headers={"Authorization": f"Bearer {token}"},
                           json={"command": ["python", "train.py"], "gpus": 2})
        assert resp.status_code == 201, resp.text
        return resp.json()["id"]
    ids = [submit("b"), submit("b"), submit("a")]
    client.loop.tick()
    types = {i: MIXED.placement_type(client.loop.jobs[i].placement) for i in ids}
    assert types == {ids[0]: "k80", ids[1]: None, ids[2]: "v100"}  # b may not borrow v100s
    rows = {q["name"]: q for q in client.get("/queues", headers=ADMIN).json()["queues"]}
    assert rows["a"]["quota"] == 2 and rows["a"]["quota_by_type"] == {"v100": 2, "k80": 0}
    assert rows["b"]["limit"] is None and rows["b"]["limit_by_type"] == {"v100": 0}
    assert rows["a"]["used_by_type"] == {"v100": 2} and rows["b"]["used_by_type"] == {"k80": 2}
    assert rows["a"]["borrowed_by_type"] == {"v100": 0}
    text = client.get("/metrics", headers=ADMIN).text
    assert 'corral_queue_type_quota_gpus{gpu_type="v100",queue="a"} 2.0' in text
    assert 'corral_queue_type_used_gpus{gpu_type="k80",queue="b"} 2.0' in text


def test_a_queue_borrowing_another_type_shows_it_borrowed_on_that_type(client) -> None:
    token = (client.dir / "tokens" / "a").read_text().strip()
    for _ in range(2):
        resp = client.post("/jobs", headers={"Authorization": f"Bearer {token}"},
                           json={"command": ["python", "train.py"], "gpus": 2})
        assert resp.status_code == 201, resp.text
    client.loop.tick()  # b is idle: a's second job borrows b's k80s
    row = {q["name"]: q for q in client.get("/queues", headers=ADMIN).json()["queues"]}["a"]
    assert row["used_by_type"] == {"v100": 2, "k80": 2}
    assert row["borrowed_by_type"] == {"v100": 0, "k80": 2} and row["borrowed"] == 2
    text = client.get("/metrics", headers=ADMIN).text
    assert 'corral_queue_type_borrowed_gpus{gpu_type="k80",queue="a"} 2.0' in text
    mine = client.get("/queues", headers={"Authorization": f"Bearer {token}"}).json()["queues"]
    assert [q["name"] for q in mine] == ["a"]  # a tenant sees its own queue's use, not b's


def test_put_queues_checks_typed_quotas_against_each_type_in_one_line(client) -> None:
    for text, words in (
            (TYPED.replace("v100 = 2", "a100 = 2"),
             'queue "a": quota names GPU type "a100", which the cluster does not have'),
            (TYPED.replace("v100 = 2", "v100 = 3"),
             "v100 quota 3 exceeds the cluster's 2 v100 GPUs"),
            (TYPED + "[queue.c]\nquota = 1\n", 'queue "c": quota 1 is for any GPU type')):
        resp = client.put("/queues", headers=ADMIN, content=text.encode())
        assert resp.status_code == 400, resp.text
        line = resp.json()["detail"]
        assert "\n" not in line and line.startswith("PUT /queues: ") and words in line, line
    resp = client.put("/queues", headers=ADMIN,
                      content=TYPED.replace("k80 = 2 }", "k80 = 1 }").encode())
    assert resp.status_code == 200, resp.text
    assert resp.json()["changed"] == "b: quota {k80 2}->{k80 1}"


def test_a_kept_typed_tree_is_checked_against_the_types_at_the_next_start(client) -> None:
    new = TYPED.replace("k80 = 2 }", "k80 = 1 }")
    assert client.put("/queues", headers=ADMIN, content=new.encode()).status_code == 200
    file_tree = parse_queues(TYPED, "queues.toml", MIXED.total_gpus, type_capacity(MIXED))
    kept = KeptQueues(client.dir, file_tree)
    start = kept.choose(MIXED.total_gpus, type_capacity(MIXED))
    assert start.event == "queues-restored" and start.tree.type_quotas("b", ("k80",)) == {"k80": 1}
    smaller = Cluster.parse("k80:1x2,p100:1x2")  # no v100s any more: the stored tree is unusable
    assert kept.choose(smaller.total_gpus, type_capacity(smaller)).event == "queues-unreadable"
