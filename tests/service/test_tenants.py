"""Tenants of the live service (issue 36 items 1, 5, 6): per-queue tokens, isolation on every
endpoint, quota changes while running, and bad queue input as one line."""

from __future__ import annotations

import json
import os
import stat
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.routing import APIRoute  # noqa: E402
    from fastapi.testclient import TestClient  # noqa: E402

from corral.core.queues import parse_queues  # noqa: E402
from corral.policies import create_policy  # noqa: E402
from corral.policies.tenancy import QueuedPolicy  # noqa: E402
from corral.service.api import create_app  # noqa: E402
from corral.service.loop import ControlLoop  # noqa: E402
from corral.service.store import Store  # noqa: E402
from corral.service.tenants import Tenancy  # noqa: E402

ADMIN_TOKEN = "admin-s3cret"
QUEUES = """
[queue.research]
quota = 2
[queue.a]
parent = "research"
quota = 1
[queue.b]
parent = "research"
quota = 1
[queue.prod]
quota = 2
"""
JOB = {"command": ["python", "train.py"]}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class Service:
    """An API over a fake executor (4 slots) with the queues above; tokens by queue."""

    def __init__(self, tmp_path: Path, executor, queues: str = QUEUES) -> None:
        self.dir = tmp_path
        self.store = Store(tmp_path / "state.db")
        tree = parse_queues(queues, "queues.toml", 4)
        self.policy = QueuedPolicy(lambda: create_policy("fifo"), tree)
        self.loop = ControlLoop(self.store, executor, self.policy, interval_s=1)
        self.tenancy = Tenancy.start(tmp_path, self.store, tree)
        self.app = create_app(self.store, executor, self.loop, ADMIN_TOKEN, stall_after_s=30,
                              tenancy=self.tenancy, data_dir=tmp_path)
        self.client = TestClient(self.app)
        self.admin = bearer(ADMIN_TOKEN)

    def token(self, queue: str) -> dict[str, str]:
        return bearer((self.dir / "tokens" / queue).read_text().strip())

    def submit(self, queue: str, **fields) -> str:
        resp = self.client.post("/jobs", headers=self.token(queue), json={**JOB, **fields})
        assert resp.status_code == 201, resp.text
        return resp.json()["id"]

    def close(self) -> None:
        self.client.close()
        self.store.close()


@pytest.fixture
def svc(tmp_path: Path, fake_executor):
    s = Service(tmp_path, fake_executor)
    yield s
    s.close()


def one_line(resp) -> str:
    detail = resp.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and "Traceback" not in detail
    return detail


# -- tokens ------------------------------------------------------------------------------------
def test_each_queue_gets_a_token_file_0600_stored_hashed_and_kept_across_restarts(
        tmp_path: Path, fake_executor) -> None:
    s = Service(tmp_path, fake_executor)
    folder = tmp_path / "tokens"
    assert sorted(p.name for p in folder.iterdir()) == ["a", "b", "default", "prod", "research"]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    tokens = {p.name: p.read_text().strip() for p in folder.iterdir()}
    for p in folder.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    stored = s.store.meta("queue_tokens")
    assert all(t not in stored for t in tokens.values())  # hashes only
    assert all(v.startswith("sha256$") for v in json.loads(stored).values())
    assert len(set(tokens.values())) == len(tokens)
    s.close()
    (folder / "a").unlink()  # handed out and deleted: the hash keeps the token valid
    s2 = Service(tmp_path, fake_executor, QUEUES + "[queue.ops]\nquota = 0\n")
    assert not (folder / "a").exists()
    assert {p.name: p.read_text().strip() for p in folder.iterdir() if p.name != "ops"} == \
        {k: v for k, v in tokens.items() if k != "a"}
    assert (folder / "ops").is_file()  # a queue added later gets one at the next start
    assert s2.client.get("/jobs", headers=bearer(tokens["a"])).status_code == 200
    assert s2.client.get("/jobs", headers=bearer("nope")).status_code == 401
    s2.close()


# -- isolation, endpoint by endpoint -------------------------------------------------------------
def _job_checks(path: str, method: str) -> Callable:
    """For a route with {job_id}: B's token is refused (403, one line) on A's job; A's and the
    admin's are not."""
    def check(s: Service, a_job: str, b_job: str) -> None:
        url = path.replace("{job_id}", a_job)
        refused = s.client.request(method, url, headers=s.token("b"))
        assert refused.status_code == 403, (url, refused.text)
        assert a_job in one_line(refused) and b_job not in refused.text
        refused = s.client.request(method, path.replace("{job_id}", b_job), headers=s.token("a"))
        assert refused.status_code == 403
        assert s.client.request(method, path.replace("{job_id}", a_job),
                                headers=s.token("prod")).status_code == 403
        for ok in (s.token("a"), s.token("research"), s.admin):  # research: a's cohort
            got = s.client.request(method, url, headers=ok)
            assert got.status_code < 400 or (method == "POST" and got.status_code == 409), \
                (url, got.text)
    return check


def _list_jobs(s: Service, a_job: str, b_job: str) -> None:
    ids = lambda h: [j["id"] for j in s.client.get("/jobs", headers=h).json()["jobs"]]  # noqa: E731
    every = {j["id"]: j["spec"]["queue"]
             for j in s.client.get("/jobs", headers=s.admin).json()["jobs"]}
    assert {a_job, b_job} <= set(every)
    for tenant, sees in (("a", {"a"}), ("b", {"b"}), ("prod", {"prod"}),
                         ("research", {"a", "b"}), ("default", {"default"})):
        assert ids(s.token(tenant)) == [i for i, q in every.items() if q in sees], tenant
    assert b_job not in ids(s.token("a")) and a_job not in ids(s.token("b"))
    assert a_job not in s.client.get("/jobs", headers=s.token("b")).text


def _submit(s: Service, a_job: str, b_job: str) -> None:
    refused = s.client.post("/jobs", headers=s.token("b"), json={**JOB, "queue": "a"})
    assert refused.status_code == 403 and "queue" in one_line(refused)
    assert s.client.post("/jobs", headers=s.token("research"),
                         json={**JOB, "queue": "prod"}).status_code == 403
    assert s.client.post("/jobs", headers=s.token("research"),
                         json={**JOB, "queue": "a"}).status_code == 201


def _no_job_ids(path: str) -> Callable:
    def check(s: Service, a_job: str, b_job: str) -> None:
        got = s.client.get(path, headers=s.token("b"))
        assert got.status_code in (200, 503), got.text
        assert a_job not in got.text and '"job-' not in got.text
    return check


def _no_job_counts(s: Service, a_job: str, b_job: str) -> None:
    """A tenant's recent rounds say when and how long, not how many jobs (everyone's)."""
    rounds = lambda h: s.client.get("/cluster", headers=h).json()["recent_rounds"]  # noqa: E731
    assert rounds(s.admin) and all("jobs" in r for r in rounds(s.admin))
    assert rounds(s.token("b")) and not any("jobs" in r for r in rounds(s.token("b")))


def _metrics(s: Service, a_job: str, b_job: str) -> None:
    refused = s.client.get("/metrics", headers=s.token("b"))
    assert refused.status_code == 403 and "admin" in one_line(refused)
    text = s.client.get("/metrics", headers=s.admin).text
    assert 'corral_queue_quota_gpus{queue="a"} 1.0' in text
    assert 'corral_queue_used_gpus{queue="research"}' in text
    assert 'corral_queue_borrowed_gpus{queue="prod"} 0.0' in text


def _get_queues(s: Service, a_job: str, b_job: str) -> None:
    names = lambda h: [q["name"] for q in s.client.get("/queues", headers=h).json()["queues"]]  # noqa: E731
    assert names(s.token("b")) == ["b"]
    assert sorted(names(s.token("research"))) == ["a", "b", "research"]
    assert names(s.admin) == ["research", "a", "b", "prod", "default"]
    # the dashboard draws other queues' GPUs as taken, without their jobs: counts per node
    others = lambda h: s.client.get("/queues", headers=h).json()[  # noqa: E731
        "other_queues_gpus_per_node"]
    assert (others(s.admin), others(s.token("research")), others(s.token("b")),
            others(s.token("prod"))) == ([0], [0], [1], [2])


def _put_queues(s: Service, a_job: str, b_job: str) -> None:
    refused = s.client.put("/queues", headers=s.token("research"), content=QUEUES.encode())
    assert refused.status_code == 403 and "admin" in one_line(refused)


#: every (method, path) the API serves, and how a tenant's access to another's jobs is checked
CHECKS: dict[tuple[str, str], Callable] = {
    ("GET", "/healthz"): _no_job_ids("/healthz"),
    ("GET", "/cluster"): lambda s, a, b: (_no_job_ids("/cluster")(s, a, b),
                                         _no_job_counts(s, a, b)),
    ("POST", "/jobs"): _submit,
    ("GET", "/jobs"): _list_jobs,
    ("GET", "/jobs/{job_id}"): _job_checks("/jobs/{job_id}", "GET"),
    ("GET", "/jobs/{job_id}/telemetry"): _job_checks("/jobs/{job_id}/telemetry", "GET"),
    ("GET", "/jobs/{job_id}/logs"): _job_checks("/jobs/{job_id}/logs", "GET"),
    ("POST", "/jobs/{job_id}/cancel"): _job_checks("/jobs/{job_id}/cancel", "POST"),
    ("GET", "/metrics"): _metrics,
    ("GET", "/queues"): _get_queues,
    ("PUT", "/queues"): _put_queues,
}


def test_every_endpoint_refuses_or_filters_another_tenants_jobs(svc: Service) -> None:
    routes = {(m, r.path) for r in svc.app.routes if isinstance(r, APIRoute)
              and r.include_in_schema for m in r.methods}
    assert routes == set(CHECKS), ("an endpoint without a tenant-isolation check here: "
                                   f"{sorted(routes ^ set(CHECKS))}")
    a_job, b_job = svc.submit("a"), svc.submit("b")
    svc.loop.tick()
    for key, check in CHECKS.items():
        check(svc, a_job, b_job)
        assert key  # which one failed shows in the traceback's locals


def test_the_dashboard_pages_need_no_token_and_hold_no_job(svc: Service) -> None:
    svc.submit("a")
    for path in ("/", "/docs", "/static/dashboard.js"):
        got = svc.client.get(path)
        assert got.status_code == 200 and "job-1" not in got.text


# -- submissions ---------------------------------------------------------------------------------
def test_a_jobs_queue_unknown_cohort_default_and_own(svc: Service) -> None:
    resp = svc.client.post("/jobs", headers=svc.admin, json={**JOB, "queue": "vison"})
    assert resp.status_code == 400
    assert one_line(resp).startswith('unknown queue "vison"; queues: a, b, prod, default')
    resp = svc.client.post("/jobs", headers=svc.admin, json={**JOB, "queue": "research"})
    assert resp.status_code == 400 and "cohort" in one_line(resp)
    resp = svc.client.post("/jobs", headers=svc.token("research"), json=JOB)
    assert resp.status_code == 400 and "several queues (a, b)" in one_line(resp)
    resp = svc.client.post("/jobs", headers=svc.admin, json={**JOB, "queue": "a/../x"})
    assert resp.status_code == 422
    unnamed = svc.client.post("/jobs", headers=svc.admin, json=JOB).json()
    assert unnamed["spec"]["queue"] == "default"
    own = svc.client.post("/jobs", headers=svc.token("prod"), json=JOB).json()
    assert own["spec"]["queue"] == "prod"
    svc.loop.tick()
    assert svc.loop.jobs[own["id"]].spec.queue == "prod"


def test_a_service_without_queues_refuses_a_named_queue(tmp_path: Path, fake_executor) -> None:
    store = Store(tmp_path / "state.db")
    loop = ControlLoop(store, fake_executor, create_policy("fifo"), interval_s=1)
    with TestClient(create_app(store, fake_executor, loop, ADMIN_TOKEN)) as c:
        resp = c.post("/jobs", headers=bearer(ADMIN_TOKEN), json={**JOB, "queue": "a"})
        assert resp.status_code == 400 and "without queues" in one_line(resp)
        assert c.get("/queues", headers=bearer(ADMIN_TOKEN)).status_code == 400
        assert c.post("/jobs", headers=bearer(ADMIN_TOKEN), json=JOB).status_code == 201
    store.close()


# -- quotas changed while running ----------------------------------------------------------------
def test_put_queues_swaps_the_tree_records_an_event_and_keeps_the_old_one_on_error(
        svc: Service) -> None:
    a_job = svc.submit("a", gpus=2)
    svc.loop.tick()
    before = svc.policy.queues
    bad = {
        "quota above": QUEUES.replace("[queue.prod]\nquota = 2", "[queue.prod]\nquota = 9"),
        "cycle": QUEUES.replace('[queue.a]\nparent = "research"',
                                '[queue.a]\nparent = "b"').replace(
            '[queue.b]\nparent = "research"', '[queue.b]\nparent = "a"'),
        "unknown key": QUEUES.replace("[queue.prod]\nquota = 2", "[queue.prod]\nqouta = 2"),
        "jobs in a removed queue": QUEUES.replace(
            '[queue.a]\nparent = "research"\nquota = 1\n', ""),
        "not TOML": "[queue.a\n",
    }
    words = {"quota above": "exceeds the cluster's 4 GPUs", "cycle": "cycle of parents",
             "unknown key": "unknown key 'qouta' (did you mean \"quota\"?)",
             "jobs in a removed queue": f'queue "a" is gone but 1 active job(s) are in it '
                                        f"({a_job})",
             "not TOML": "not valid TOML"}
    for what, text in bad.items():
        resp = svc.client.put("/queues", headers=svc.admin, content=text.encode())
        assert resp.status_code == 400, (what, resp.text)
        line = one_line(resp)
        assert line.startswith("PUT /queues: ") and words[what] in line, (what, line)
        assert svc.policy.queues is before and svc.tenancy.tree is before
    new = QUEUES.replace("[queue.prod]\nquota = 2", "[queue.prod]\nquota = 1\nlimit = 3") + \
        "[queue.ops]\nquota = 1\n"
    resp = svc.client.put("/queues", headers=svc.admin, content=new.encode())
    assert resp.status_code == 200, resp.text
    assert resp.json()["new_tokens"] == ["tokens/ops"]
    assert resp.json()["changed"] == "+ops (quota 1); prod: quota 2->1, limit None->3"
    assert svc.policy.queues.quota("prod") == 1 and svc.policy.queues["prod"].any_limit == 3
    events = [e for e in svc.store.events() if e["kind"] == "queues-changed"]
    assert [e["detail"] for e in events] == [resp.json()["changed"]]
    rows = {q["name"]: q for q in svc.client.get("/queues", headers=svc.admin).json()["queues"]}
    assert rows["prod"]["quota"] == 1 and rows["prod"]["limit"] == 3
    assert rows["a"]["used"] == 2 and rows["a"]["borrowed"] == 1
    assert rows["research"]["used"] == 2 and rows["research"]["borrowed"] == 0
    assert svc.client.get("/jobs", headers=svc.token("ops")).json()["jobs"] == []
    svc.loop.tick()  # the next round runs on the new tree
    # the change on GET /queues: the admin reads it whole, a team only what is its own
    changes = lambda h: [c["detail"] for c in  # noqa: E731
                         svc.client.get("/queues", headers=h).json()["changes"]]
    assert changes(svc.admin) == ["+ops (quota 1); prod: quota 2->1, limit None->3"]
    assert changes(svc.token("prod")) == ["prod: quota 2->1, limit None->3"]
    assert changes(svc.token("ops")) == ["+ops (quota 1)"]
    assert changes(svc.token("a")) == []  # nothing of it is a's: not even that it happened


# -- bad queues file at `corral serve` -------------------------------------------------------------
@pytest.mark.parametrize("text, words", [
    ("[queue.a]\nqouta = 1\n", "queues.toml: queue \"a\": unknown key 'qouta' (did you mean"),
    ("[queue.a]\nquota = 5\n", "queues.toml: queue \"a\": quota 5 exceeds the cluster's 2 GPUs"),
    ('[queue.a]\nparent = "b"\n[queue.b]\nparent = "a"\n', "cycle of parents"),
    ('[queue.a]\nparent = "reserch"\n[queue.research]\n',
     'unknown parent "reserch" (did you mean "research"?)'),
])
def test_corral_serve_refuses_a_bad_queues_file_in_one_line(tmp_path: Path, text: str,
                                                            words: str) -> None:
    import subprocess
    import sys

    (tmp_path / "queues.toml").write_text(text)
    home = tmp_path / "home"
    env = {**os.environ, "CORRAL_HOME": str(home)}
    env.pop("CORRAL_TOKEN", None)
    done = subprocess.run([sys.executable, "-c", "from corral.cli.main import app; app()",
                           "serve", "--slots", "2", "--port", "0", "--policy", "fifo",
                           "--queues", str(tmp_path / "queues.toml")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert not (home / "token").exists() and not (home / "state.db").exists()
    assert not (home / "tokens").exists()


def test_a_start_whose_queues_file_drops_a_queue_with_active_jobs_is_refused(
        svc: Service) -> None:
    from corral.core.errors import InputError
    from corral.service.store import stored_active_queues
    from corral.service.tenants import check_change

    a_job = svc.submit("a")
    active = stored_active_queues(svc.dir / "state.db")  # read only, as `corral serve` reads it
    assert active == {"a": [a_job]}
    check_change(parse_queues(QUEUES, "queues.toml", 4), active)
    with pytest.raises(InputError, match='queues.toml: queue "a" is gone but 1 active job'):
        check_change(parse_queues("[queue.b]\nquota = 1\n", "queues.toml", 4), active)
    assert stored_active_queues(svc.dir / "none.db") == {}


def test_a_quota_change_takes_effect_at_the_next_round_with_no_job_coming_or_going(
        tmp_path: Path, fake_executor) -> None:
    svc = Service(tmp_path, fake_executor,
                  "[queue.a]\nquota = 1\nlimit = 1\n[queue.b]\nquota = 3\n")
    try:
        first, second = svc.submit("a"), svc.submit("a")
        for _ in range(3):
            svc.loop.tick()
        jobs = {j["id"]: j for j in svc.client.get("/jobs", headers=svc.admin).json()["jobs"]}
        assert jobs[first]["status"] == "running" and jobs[second]["status"] == "queued"
        metrics = svc.client.get("/metrics", headers=svc.admin).text
        assert 'corral_queue_waiting_jobs{queue="a"} 1.0' in metrics
        assert f'corral_job_gpus{{job="{first}",queue="a"}} 1.0' in metrics  # per job, by queue
        # a holds its quota (1 of 1): its waiting job is no broken promise; b lends nothing
        assert 'corral_queue_longest_wait_below_quota_seconds{queue="a"} 0.0' in metrics
        assert 'corral_queue_lent_gpus{queue="b"} 0.0' in metrics
        resp = svc.client.put("/queues", headers=svc.admin,
                              content=b"[queue.a]\nquota = 2\nlimit = 2\n[queue.b]\nquota = 2\n")
        assert resp.status_code == 200, resp.text
        rounds = svc.loop.rounds
        while svc.loop.rounds < rounds + 2:  # the next round (1 s interval) and one more
            svc.loop.tick()  # no arrival, no finish: the new quota alone moves the second job
            time.sleep(0.05)
        jobs = {j["id"]: j for j in svc.client.get("/jobs", headers=svc.admin).json()["jobs"]}
        assert jobs[second]["status"] == "running", jobs[second]
    finally:
        svc.close()


def test_lent_gpus_and_the_wait_below_quota_are_computed_per_queue() -> None:
    from corral.service.metrics import lent_and_waits

    rows = [{"name": "a", "leaf": True, "quota": 2, "used": 0, "borrowed": 0},
            {"name": "b", "leaf": True, "quota": 2, "used": 4, "borrowed": 2},
            {"name": "c", "leaf": True, "quota": 2, "used": 1, "borrowed": 0}]
    lent_and_waits(rows, {"a": 42.0, "b": 7.0})
    # 3 GPUs of quota unused (a 2, c 1), 2 of them borrowed by b: each lends 2/3 of its unused
    assert [round(r["lent"], 3) for r in rows] == [1.333, 0.0, 0.667]
    # a waits below its quota (the promise broken for 42 s); b waits above it: not counted
    assert [r["wait_below_quota_s"] for r in rows] == [42.0, 0.0, 0.0]
