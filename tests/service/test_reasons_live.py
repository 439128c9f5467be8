"""Why a job waits, live (corral.core.reasons through the service): `GET /jobs/ID` and the
stored job carry the reason (kept across a restart), `/metrics` counts waiting jobs by reason
and queue, a preemption event says why; and a team's reasons and events name nothing of
another team's jobs or queue."""

from __future__ import annotations

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
from corral.service.jobs import LiveJob  # noqa: E402
from corral.service.loop import ControlLoop  # noqa: E402
from corral.service.store import Store  # noqa: E402
from corral.service.tenants import Tenancy  # noqa: E402

ADMIN = "admin-s3cret"
# min_runtime_s 0: a borrower is preempted at the next round (its 30 s default would hold it)
TEAMS = "min_runtime_s = 0\n[queue.nlp]\nquota = 2\n[queue.vision]\nquota = 2\n"


class TwoTeams:
    """fifo per queue over a fake executor of 4 slots, two teams of quota 2."""

    def __init__(self, tmp_path: Path, executor) -> None:
        self.dir = tmp_path
        self.store = Store(tmp_path / "state.db")
        tree = parse_queues(TEAMS, "queues.toml", 4)
        self.loop = ControlLoop(self.store, executor, QueuedPolicy(
            lambda: create_policy("fifo"), tree), interval_s=1)
        self.tenancy = Tenancy.start(tmp_path, self.store, tree)
        self.client = TestClient(create_app(self.store, executor, self.loop, ADMIN,
                                            tenancy=self.tenancy, data_dir=tmp_path))

    def auth(self, queue: str | None) -> dict[str, str]:
        token = ADMIN if queue is None else (self.dir / "tokens" / queue).read_text().strip()
        return {"Authorization": f"Bearer {token}"}

    def submit(self, queue: str, gpus: int) -> str:
        resp = self.client.post("/jobs", headers=self.auth(queue),
                                json={"command": ["python", "train.py"], "gpus": gpus})
        assert resp.status_code == 201, resp.text
        return resp.json()["id"]

    def job(self, job_id: str, queue: str | None = None) -> dict:
        return self.client.get(f"/jobs/{job_id}", headers=self.auth(queue)).json()

    def until(self, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 10  # rounds every second
        while not done():
            assert time.monotonic() < deadline, "no round did it within 10 s"
            self.loop.tick()
            time.sleep(0.05)

    def close(self) -> None:
        self.client.close()
        self.store.close()


def test_a_team_at_its_quota_sees_why_its_job_waits_and_the_reason_survives_a_restart(
        tmp_path: Path, fake_executor) -> None:
    s = TwoTeams(tmp_path, fake_executor)
    try:
        vision = s.submit("vision", 2)
        first = s.submit("nlp", 2)
        s.until(lambda: s.job(vision)["status"] == s.job(first)["status"] == "running")
        waiting = s.submit("nlp", 2)
        s.until(lambda: (s.job(waiting).get("reason") or {}).get("kind") == "quota")
        shown = s.job(waiting, "nlp")
        assert shown["status"] == "queued"
        assert shown["reason"] == {"kind": "quota", "queue": "nlp", "text":
                                   "queue nlp holds its quota 2/2 and nothing is idle to borrow"}
        assert vision not in shown["reason"]["text"] and "vision" not in shown["reason"]["text"]
        metrics = s.client.get("/metrics", headers=s.auth(None)).text
        assert 'corral_waiting_jobs{queue="nlp",reason="quota"} 1.0' in metrics
        assert 'corral_waiting_jobs{queue="vision",reason="quota"} 0.0' in metrics
        s.loop.tick()
        s.store.save_jobs(job.record() for job in s.loop.jobs.values())
    finally:
        s.close()
    store = Store(tmp_path / "state.db")  # the service restarted: the reason is stored
    try:
        doc = next(d for d in store.jobs() if d["id"] == waiting)
        assert LiveJob.from_doc(doc).reason.text.startswith("queue nlp holds its quota 2/2")
    finally:
        store.close()


def test_a_preemption_says_why_and_names_no_job_of_the_team_that_took_the_gpus(
        tmp_path: Path, fake_executor) -> None:
    s = TwoTeams(tmp_path, fake_executor)
    try:
        borrower = s.submit("vision", 4)  # nlp idle: vision borrows all four
        s.until(lambda: s.job(borrower)["gpus"] == 4)
        taker = s.submit("nlp", 2)  # nlp's quota comes back: the gang of 4 is preempted
        s.until(lambda: any(e["kind"] == "preempted" for e in s.job(borrower)["events"]))
        [event] = [e for e in s.job(borrower, "vision")["events"] if e["kind"] == "preempted"]
        # which queue took the GPUs back (issue 43 item 3), never which of its jobs
        assert event["detail"].startswith("by fifo: its 4 GPU(s) went to a job (queue nlp)")
        assert taker not in event["detail"]
        reason = s.job(borrower, "vision")["reason"]
        assert reason["queue"] == "vision" and reason["kind"] == "ranked_lower"
        assert reason["text"] in event["detail"]  # the event says why, as the job does
        assert taker not in reason["text"] and "nlp" not in reason["text"]
    finally:
        s.close()
