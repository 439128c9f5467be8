"""The API cannot be worn down and says what it does (issues 43, 45): the token before the body,
destructive PUT /queues refused unless explicit, bounded submissions, GET /jobs paged and
filtered with a total (a tenant's of its own jobs only), 503 beyond the requests in progress,
and an OpenAPI schema that declares every status a route answers."""

from __future__ import annotations

import asyncio
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient  # noqa: E402

from test_tenants import QUEUES, Service  # noqa: E402

from corral.service.limits import ConcurrencyLimit  # noqa: E402

#: (method, route, status) of every answer the tests in this process got: the schema must
#: declare each (`test_the_schema_declares_every_status_the_service_answers`).
SEEN: set[tuple[str, str, int]] = set()


class Recorder(TestClient):
    """A test client that notes each answer's route and status in SEEN."""

    def request(self, method, url, *args, **kwargs):  # type: ignore[override]
        resp = super().request(method, url, *args, **kwargs)
        route = re.sub(r"^/jobs/[^/]+", "/jobs/{job_id}", str(url).split("?")[0])
        SEEN.add((method.upper(), route, resp.status_code))
        return resp


@pytest.fixture
def svc(tmp_path: Path, fake_executor) -> Iterator[Service]:
    s = Service(tmp_path, fake_executor)
    s.client = Recorder(s.app)
    yield s
    s.close()


# -- the token before the body -----------------------------------------------------------------
@pytest.mark.parametrize("method, path, body", [
    ("POST", "/jobs", b"x"), ("POST", "/jobs", b"{}"), ("POST", "/jobs", b'{"command": []}'),
    ("PUT", "/queues", b""), ("PUT", "/queues", b"[queue.a\n"),
    ("POST", "/jobs/job-1/cancel", b"x"),
])
def test_a_request_without_a_valid_token_is_401_whatever_its_body(svc, method, path,
                                                                  body) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        resp = svc.client.request(method, path, content=body,
                                  headers={**headers, "Content-Type": "application/json"})
        assert resp.status_code == 401, (method, path, body, resp.text)
        assert resp.json() == {"detail": "missing or wrong bearer token"}


def test_a_tenants_token_on_an_admin_body_endpoint_is_403_before_its_body(svc) -> None:
    resp = svc.client.put("/queues", headers=svc.token("a"), content=b"")
    assert resp.status_code == 403 and "admin token" in resp.json()["detail"]


# -- PUT /queues: nothing destroyed unless said ------------------------------------------------
@pytest.mark.parametrize("body", [b"", b"  \n", b"min_runtime_s = 5\n"])
def test_an_empty_tree_is_refused_and_the_tree_stays(svc, body) -> None:
    before = svc.tenancy.tree
    for query in ("", "?drop_queues=true"):
        resp = svc.client.put(f"/queues{query}", headers=svc.admin, content=body)
        assert resp.status_code == 400, resp.text
        detail = resp.json()["detail"]
        assert "\n" not in detail and ("empty" in detail or "declares no queue" in detail)
        assert svc.tenancy.tree is before and svc.policy.queues is before
    assert [e for e in svc.store.events() if e["kind"] == "queues-changed"] == []


def test_dropping_queues_needs_the_flag_and_never_drops_one_with_jobs(svc) -> None:
    without_prod = QUEUES.replace("[queue.prod]\nquota = 2\n", "")
    before = svc.tenancy.tree
    resp = svc.client.put("/queues", headers=svc.admin, content=without_prod.encode())
    assert resp.status_code == 400
    assert resp.json()["detail"] == (
        "PUT /queues: drops queue(s) prod (their tokens stop working): send it again with "
        "?drop_queues=true (corral queues --set FILE --drop) to confirm; nothing changed")
    assert svc.tenancy.tree is before
    job = svc.submit("prod")
    for query in ("", "?drop_queues=true"):  # active jobs: refused even when confirmed
        resp = svc.client.put(f"/queues{query}", headers=svc.admin,
                              content=without_prod.encode())
        assert resp.status_code == 400 and f"active job(s) are in it ({job})" in resp.text
        assert svc.tenancy.tree is before
    svc.loop.tick()  # taken in
    svc.client.post(f"/jobs/{job}/cancel", headers=svc.admin)
    svc.loop.tick()
    resp = svc.client.put("/queues?drop_queues=true", headers=svc.admin,
                          content=without_prod.encode())
    assert resp.status_code == 200 and resp.json()["changed"] == "-prod", resp.text
    assert svc.client.get("/jobs", headers=svc.token("prod")).status_code == 401


# -- bounded submissions -------------------------------------------------------------------------
def test_oversize_fields_are_refused_in_one_line_and_a_summary_holds_the_command_once(
        svc) -> None:
    for body in ({"command": ["x" * 1_024_000]}, {"command": ["python"] + ["a" * 4000] * 5},
                 {"command": ["x"], "name": "n" * 200}):
        resp = svc.client.post("/jobs", headers=svc.admin, json=body)
        assert resp.status_code in (413, 422), resp.status_code
        assert "\n" not in resp.json()["detail"] and len(resp.text) < 1000
    job = svc.client.post("/jobs", headers=svc.admin, json={"command": ["python", "t.py"]}).json()
    assert job["command"] == ["python", "t.py"] and "command" not in job["spec"]
    listed = svc.client.get("/jobs", headers=svc.admin).text
    assert listed.count("t.py") == 1


# -- paging and filters ----------------------------------------------------------------------------
def _ids(resp) -> list[str]:
    assert resp.status_code == 200, resp.text
    return [j["id"] for j in resp.json()["jobs"]]


def test_the_job_list_pages_with_a_cursor_and_a_total(svc) -> None:
    ids = [svc.submit("a", name=f"n{i}") for i in range(7)]
    get = lambda q: svc.client.get(f"/jobs{q}", headers=svc.admin)  # noqa: E731
    first = get("?limit=3").json()
    assert [j["id"] for j in first["jobs"]] == ids[:3]
    assert first["total"] == 7 and first["next"] == ids[2]
    second = get(f"?limit=3&after={first['next']}").json()
    third = get(f"?limit=3&after={second['next']}").json()
    assert [j["id"] for j in second["jobs"] + third["jobs"]] == ids[3:]
    assert third["next"] is None and third["total"] == 7
    assert _ids(get("?limit=2&order=newest")) == ids[::-1][:2]
    assert _ids(get(f"?limit=2&order=newest&after={ids[2]}")) == [ids[1], ids[0]]
    assert get("?limit=0").json() == {"jobs": [], "total": 7, "next": None}
    for bad, code in (("?limit=1001", 422), ("?limit=-1", 422), ("?after=job-x", 422),
                      ("?status=lost", 422), ("?order=sideways", 422)):
        resp = get(bad)
        assert resp.status_code == code and "\n" not in resp.json()["detail"], (bad, resp.text)
    assert len(get("").json()["jobs"]) == 7  # default limit 100


def test_the_job_list_filters_by_status_queue_and_name(svc) -> None:
    a1 = svc.submit("a", name="resnet-a")
    svc.submit("b", name="bert-b")
    p1 = svc.submit("prod", name="resnet-prod")
    svc.loop.tick()  # taken in
    svc.client.post(f"/jobs/{a1}/cancel", headers=svc.admin)
    svc.loop.tick()
    get = lambda q: svc.client.get(f"/jobs{q}", headers=svc.admin).json()  # noqa: E731
    assert [j["id"] for j in get("?status=cancelled")["jobs"]] == [a1]
    assert get("?status=queued&status=running")["total"] == 2
    assert [j["id"] for j in get("?queue=prod")["jobs"]] == [p1]
    assert get("?queue=a&queue=b")["total"] == 2
    assert [j["id"] for j in get("?name=resnet")["jobs"]] == [a1, p1]
    assert get("?name=resnet&queue=prod&limit=0")["total"] == 1
    assert get("?name=RESNET")["total"] == 0  # case-sensitive


def test_a_tenant_lists_and_counts_its_own_jobs_only(svc) -> None:
    for _ in range(3):
        svc.submit("a")
    b_job = svc.submit("b")
    a_view = svc.client.get("/jobs?limit=1", headers=svc.token("a")).json()
    assert a_view["total"] == 3 and b_job not in str(a_view)
    research = svc.client.get("/jobs?limit=0", headers=svc.token("research")).json()
    assert research["total"] == 4  # the cohort's token covers a and b
    resp = svc.client.get("/jobs?queue=b", headers=svc.token("a"))
    assert resp.status_code == 403 and "b" in resp.json()["detail"] and "total" not in resp.text
    resp = svc.client.get("/jobs?queue=a&queue=prod&limit=0", headers=svc.token("a"))
    assert resp.status_code == 403
    assert svc.client.get("/jobs?status=queued&limit=0", headers=svc.token("prod")).json()[
        "total"] == 0


def test_a_page_of_the_store_is_indexed(svc) -> None:
    plans = [" ".join(str(c) for c in row) for row in svc.store._exec(
        "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE status != 'new' AND status IN (?) "
        "AND seq > ? ORDER BY seq LIMIT 100", ("queued", 5))]
    assert any("jobs_status_seq" in p or "INTEGER PRIMARY KEY" in p for p in plans), plans
    assert not any("SCAN jobs" == p.split(" ", 3)[-1] for p in plans), plans


# -- bounded concurrency -----------------------------------------------------------------------
def test_requests_beyond_the_limit_in_progress_are_503_with_retry_after() -> None:
    release = asyncio.Event()
    sent: list[dict] = []

    async def slow_app(scope, receive, send) -> None:
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def record(message) -> None:
        sent.append(message)

    async def no_body() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def main() -> None:
        limited = ConcurrencyLimit(slow_app, max_requests=2)
        scope = {"type": "http", "path": "/jobs"}
        held = [asyncio.create_task(limited(scope, no_body, record)) for _ in range(2)]
        await asyncio.sleep(0)
        await limited(scope, no_body, record)  # the third: answered at once
        assert sent[0]["status"] == 503 and (b"retry-after", b"1") in sent[0]["headers"]
        probe = asyncio.create_task(limited({"type": "http", "path": "/healthz"}, no_body,
                                            record))  # never refused, never counted
        await asyncio.sleep(0)
        assert limited.in_progress == 2
        release.set()
        await asyncio.gather(*held, probe)
        assert limited.in_progress == 0

    asyncio.run(main())
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [503, 200, 200, 200]


# -- the schema declares what the service answers ------------------------------------------------
def _tour(svc: Service) -> None:
    """Requests that get each status each route answers (SEEN records them)."""
    c, admin, a = svc.client, svc.admin, svc.token("a")
    job = svc.submit("a")
    other = svc.submit("b")
    for path in (f"/jobs/{job}", f"/jobs/{job}/telemetry", f"/jobs/{job}/logs?rank=0"):
        for headers in (admin, {}, svc.token("b")):
            c.get(path, headers=headers)
        c.get(path.replace(job, "nope"), headers=admin)
    c.get(f"/jobs/{job}/logs?rank=-1", headers=admin)
    c.post("/jobs", headers=admin, json={"command": ["x"], "gpus": 9})
    c.post("/jobs", headers=a, json={"command": ["x"], "queue": "prod"})
    c.post("/jobs", headers=admin, content=b"x" * (2 << 20))
    c.post(f"/jobs/{other}/cancel", headers=a)
    c.post("/jobs/nope/cancel", headers=admin)
    svc.loop.tick()  # taken in
    c.post(f"/jobs/{job}/cancel", headers=admin)
    svc.loop.tick()
    c.post(f"/jobs/{job}/cancel", headers=admin)
    for headers in (admin, a, {}):
        for path in ("/metrics", "/cluster", "/queues", "/jobs?limit=1"):
            c.get(path, headers=headers)
    c.get("/jobs?queue=b", headers=a)
    c.get("/jobs?after=nope", headers=admin)
    c.get("/jobs?limit=5000", headers=admin)
    c.get("/healthz")
    for query, body in (("", QUEUES), ("", ""), ("?drop_queues=maybe", QUEUES)):
        c.put(f"/queues{query}", headers=admin, content=body.encode())


def test_the_schema_declares_every_status_the_service_answers(svc) -> None:
    """Every (route, status) the tests in this process got is declared in the schema, error
    bodies are ErrorDetail (one line in `detail`), /metrics is text, and POST /jobs links its
    id to the job's routes."""
    _tour(svc)
    schema = svc.client.get("/openapi.json").json()
    codes = {code for _, _, code in SEEN}
    assert {200, 201, 202, 400, 401, 403, 404, 409, 413, 422} <= codes, codes
    for method, path, code in sorted(SEEN):
        op = schema["paths"].get(path, {}).get(method.lower())
        if op is None:
            continue  # the dashboard's files are not API routes
        assert str(code) in op["responses"], (method, path, code, sorted(op["responses"]))
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            for code, resp in op["responses"].items():
                if code.startswith("4") or (code == "503" and path != "/healthz"):
                    ref = resp["content"]["application/json"]["schema"]["$ref"]
                    assert ref.endswith("/ErrorDetail"), (method, path, code)
    detail = schema["components"]["schemas"]["ErrorDetail"]["properties"]["detail"]
    assert detail["type"] == "string"
    assert list(schema["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == [
        "text/plain"]
    submit = schema["paths"]["/jobs"]["post"]
    assert submit["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/Submission")
    links = submit["responses"]["201"]["links"]
    assert {link["operationId"] for link in links.values()} == {
        "getJob", "getTelemetry", "getLogs", "cancelJob"}
    command = schema["components"]["schemas"]["Submission"]["properties"]["command"]
    assert command["prefixItems"][0]["minLength"] == 1 and command["items"]["maxLength"] == 4096
    page = schema["paths"]["/jobs"]["get"]
    assert {p["name"] for p in page["parameters"]} == {"limit", "after", "status", "queue",
                                                       "name", "order"}
    limit = next(p for p in page["parameters"] if p["name"] == "limit")["schema"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (0, 1000, 100)
