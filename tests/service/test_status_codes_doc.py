"""The status-code table of the service's docs against what the service answers.

The table is the first markdown table whose header has a cell with "status" in it, in
docs/service.md (README.md where that page does not exist). Each row names a code and when it
is answered; the row's words pick the requests below (CASES) that the row describes, and each
must be answered with the row's code. A row whose words pick no request fails the test (so a
new row comes with its request here), as does an error code the service answers that the table
does not list."""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
with warnings.catch_warnings():  # starlette's test client warns about its httpx dependency
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient  # noqa: E402

from corral.core.queues import parse_queues  # noqa: E402
from corral.policies import create_policy  # noqa: E402
from corral.policies.tenancy import QueuedPolicy  # noqa: E402
from corral.service.api import create_app  # noqa: E402
from corral.service.kept_queues import KeptQueues  # noqa: E402
from corral.service.loop import ControlLoop  # noqa: E402
from corral.service.store import Store  # noqa: E402
from corral.service.tenants import Tenancy  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {**AUTH, "Content-Type": "application/json"}
JOB = {"command": ["python", "train.py"]}


def status_table(text: str) -> list[tuple[int, str]]:
    """(code, the row's other words) of the first markdown table whose header names "status"."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("|") or "status" not in line.lower():
            continue
        if i + 1 >= len(lines) or not re.fullmatch(r"\s*\|[\s:|-]+\|?\s*", lines[i + 1]):
            continue  # not a header: no |---| line under it
        rows = []
        for row in lines[i + 2:]:
            if not row.lstrip().startswith("|"):
                break
            cells = [c.strip() for c in row.strip().strip("|").split("|")]
            codes = [int(c) for c in re.findall(r"\b([1-5]\d\d)\b", cells[0])]
            assert codes, f"a row of the status table names no code in its first cell: {row}"
            rows.extend((code, " ".join(cells[1:])) for code in codes)
        return rows
    return []


def documented() -> tuple[Path, list[tuple[int, str]]]:
    page = ROOT / "docs" / "service.md"
    if not page.is_file():
        page = ROOT / "README.md"
    return page, status_table(page.read_text())


@pytest.fixture
def client(tmp_path: Path, fake_executor):
    store = Store(tmp_path / "state.db")
    tree = parse_queues("[queue.team]\nquota = 1\n", "queues.toml", 4)
    loop = ControlLoop(store, fake_executor,
                       QueuedPolicy(lambda: create_policy("fifo"), tree), interval_s=1)
    tenancy = Tenancy.start(tmp_path, store, tree)
    kept = KeptQueues(tmp_path, tree)
    c = TestClient(create_app(store, fake_executor, loop, TOKEN, stall_after_s=30,
                              tenancy=tenancy, data_dir=tmp_path, kept=kept))
    c.loop = loop  # type: ignore[attr-defined]
    c.kept = kept  # type: ignore[attr-defined]
    c.tenant = {  # type: ignore[attr-defined]  # queue "team"'s token
        "Authorization": f"Bearer {(tmp_path / 'tokens' / 'team').read_text().strip()}"}
    yield c
    c.close()
    store.close()


def _ended_job(c) -> str:
    job = c.post("/jobs", headers=AUTH, json=JOB).json()["id"]
    c.loop.tick()  # taken in
    c.post(f"/jobs/{job}/cancel", headers=AUTH)
    c.loop.tick()  # cancelled
    return job


def _stalled(c):
    c.loop.last_round = time.monotonic() - 3600
    return c.get("/healthz")


def _unkeepable(c):
    def full(tree) -> None:
        raise OSError(28, "No space left on device")
    c.kept.save = full
    return c.put("/queues", headers=AUTH, content=b"[queue.team]\nquota = 2\n")


#: (words of a row, the request it describes): a row must be answered as each request it names
CASES: list[tuple[str, Callable]] = [
    (r"query answered", lambda c: c.get("/jobs", headers=AUTH)),
    (r"\baccepted\b", lambda c: c.post("/jobs", headers=AUTH, json=JOB)),
    (r"cancel request", lambda c: c.post(
        f"/jobs/{c.post('/jobs', headers=AUTH, json=JOB).json()['id']}/cancel", headers=AUTH)),
    (r"inconsistent", lambda c: c.post("/jobs", headers=AUTH,
                                       json={**JOB, "min_gpus": 3, "max_gpus": 2})),
    (r"unknown queue", lambda c: c.post("/jobs", headers=AUTH, json={**JOB, "queue": "nope"})),
    (r"cannot be honoured", lambda c: c.put("/queues", headers=AUTH,
                                            content=b"[queue.team]\nquota = 99\n")),
    (r"missing or wrong bearer token", lambda c: c.get("/jobs")),
    (r"another queue's job", lambda c: c.get(
        f"/jobs/{c.post('/jobs', headers=AUTH, json=JOB).json()['id']}", headers=c.tenant)),
    (r"admin token", lambda c: c.get("/metrics", headers=c.tenant)),
    (r"unknown job", lambda c: c.get("/jobs/job-404", headers=AUTH)),
    (r"already ended", lambda c: c.post(f"/jobs/{_ended_job(c)}/cancel", headers=AUTH)),
    (r"1 MiB", lambda c: c.post("/jobs", headers=JSON, content=b"[" + b"0," * (1 << 20) + b"0]")),
    (r"unparsable|not JSON|invalid JSON", lambda c: c.post("/jobs", headers=JSON,
                                                           content=b'{"command": ["x"]')),
    (r"not an object", lambda c: c.post("/jobs", headers=AUTH, json=["python", "train.py"])),
    (r"\bfield\b|wrong type|out of bounds|not a valid submission",
     lambda c: c.post("/jobs", headers=AUTH, json={"command": [], "colour": "red"})),
    (r"query parameter", lambda c: c.get("/jobs/job-1/logs?rank=-1", headers=AUTH)),
    (r"healthz|stalled", _stalled),
    (r"cannot be kept", _unkeepable),
]
#: every error code the service answers on purpose: the table must list each
ERROR_CODES = {400, 401, 403, 404, 409, 413, 422, 500, 503}


def test_an_unparsable_body_gets_a_one_line_422(client) -> None:
    resp = client.post("/jobs", headers=JSON, content=b'{"command": ["x"]')
    assert resp.status_code == 422
    assert resp.json()["detail"].startswith("invalid submission: body: not valid JSON (")
    assert "\n" not in resp.json()["detail"]


def mismatches(rows: list[tuple[int, str]], client, page: str) -> list[str]:
    """What is wrong with a status table's rows: a row whose code is not what the service
    answers for a request it describes, a row that describes none, an error code not listed."""
    wrong = []
    for code, words in rows:
        cases = [(pattern, request) for pattern, request in CASES
                 if re.search(pattern, words, re.IGNORECASE)]
        if not cases:
            wrong.append(f"{page}: the row '{code} | {words}' names no request this test "
                         "knows: add its request to CASES")
        for pattern, request in cases:
            got = request(client).status_code
            if got != code:
                wrong.append(f"{page}: '{code} | {words}': the service answers {got} "
                             f"({pattern})")
    missing = ERROR_CODES - {code for code, _ in rows}
    if missing:
        wrong.append(f"{page}'s status table does not list {sorted(missing)}")
    return wrong


def test_the_status_codes_the_docs_list_are_what_the_service_answers(client) -> None:
    page, rows = documented()
    if not rows:
        pytest.skip(f"{page.relative_to(ROOT)} has no status-code table (a markdown table "
                    "whose header names 'status') yet")
    assert not mismatches(rows, client, page.name)


PROPOSED = """
| status | when |
|---|---|
| 200 | a query answered (`GET`) |
| 201 | `POST /jobs`: the job was accepted; the answer is the job, with `adjusted` listing what the service changed (a `max_gpus` over the cluster's GPUs, capped) |
| 202 | `POST /jobs/{id}/cancel`: the cancel request was taken (the job ends at the next tick) |
| 400 | a well-formed submission that is inconsistent: `min_gpus` > `max_gpus`, more GPUs than the cluster has, `max_batch_size` < `batch_size`, an empty program name; `--executor emulated`: a model it does not know |
| 401 | a missing or wrong bearer token |
| 403 | a queue's token: another queue's job, or what needs the admin token |
| 404 | an unknown job id (unknown job) |
| 409 | cancelling a job that has already ended |
| 413 | a request body over 1 MiB |
| 422 | a body that is not a valid submission: unparsable (not JSON), not an object, a field missing or unknown, a value of the wrong type or out of bounds; a bad query parameter (`rank`, `tail`) |
| 500 | `PUT /queues`: the new tree cannot be kept in the data directory (`queues-changed.toml`: a full disk, say); the old tree stays |
| 503 | `GET /healthz`: the control loop or the executor has stalled (no round for 30 s) |
"""


def test_the_table_proposed_for_the_docs_passes(client) -> None:
    """The table the docs are to hold (issue 37 item 4) is what the service answers; the
    README's old words (400 for an unparsable body) are caught."""
    rows = status_table(PROPOSED)
    assert {code for code, _ in rows} >= ERROR_CODES | {200, 201, 202}
    assert mismatches(rows, client, "proposed") == []
    old = status_table(PROPOSED.replace("| 422 | a body", "| 400 | a body"))
    assert mismatches(old, client, "old")[0].startswith(
        "old: '400 | a body that is not a valid submission: unparsable (not JSON)")
