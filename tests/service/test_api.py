"""The REST API in-process: authentication, submissions and their one-line errors, job queries,
cancel, logs, OpenAPI and Prometheus metrics."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
with warnings.catch_warnings():  # starlette's test client warns about its httpx dependency
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient  # noqa: E402

from corral.core.cluster import Placement  # noqa: E402
from corral.core.jobs import Assignment, Decision  # noqa: E402
from corral.core.policy import Policy  # noqa: E402
from corral.core.reasons import shrink_reasons  # noqa: E402
from corral.policies import create_policy  # noqa: E402
from corral.protocol.report import Report
from corral.service.api import create_app  # noqa: E402
from corral.service.loop import ControlLoop  # noqa: E402
from corral.service.store import Store  # noqa: E402

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def api(tmp_path: Path, fake_executor):
    store = Store(tmp_path / "state.db")
    loop = ControlLoop(store, fake_executor, create_policy("fifo"), interval_s=1)
    client = TestClient(create_app(store, fake_executor, loop, TOKEN))
    yield client, loop
    client.close()
    store.close()


def test_calls_without_the_right_token_are_refused(api) -> None:
    client, _ = api
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
        resp = client.get("/jobs", headers=headers)
        assert resp.status_code == 401
        assert resp.json()["detail"] == "missing or wrong bearer token"
    assert client.post("/jobs", json={"command": ["true"]}).status_code == 401
    assert client.get("/metrics").status_code == 401
    assert client.get("/healthz").json()["status"] == "ok"


def test_openapi_schema_lists_the_endpoints(api) -> None:
    client, _ = api
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/jobs", "/jobs/{job_id}", "/jobs/{job_id}/cancel", "/jobs/{job_id}/logs",
            "/metrics", "/cluster"} <= set(paths)


@pytest.mark.parametrize("body, field, words", [
    ({"command": []}, "command", "at least 1 item"),
    ({"command": ["x"], "batch_size": 0}, "batch_size", "greater than or equal to 1"),
    ({"command": ["x"], "gpus": "two"}, "gpus", "valid integer"),
    ({"command": ["x"], "lr_rule": "cubic"}, "lr_rule", "'adascale', 'sqrt' or 'linear'"),
    ({"command": ["x"], "colour": "red"}, "colour", "Extra inputs are not permitted"),
    ({"gpus": 1}, "command", "Field required"),
    ({"command": ["x"], "trace_duration_s": 0}, "trace_duration_s", "greater than 0"),
    ({"command": ["x"], "epochs": 0}, "epochs", "greater than or equal to 1"),
    ({"command": [" "]}, "command", "the program name (the first argument) is empty"),
    ({"command": ["x" * 4097]}, "command.0", "at most 4096 characters"),
    ({"command": ["x"] + ["y" * 4000] * 5}, "body", "command: 20001 characters in all, over 16384"),
    ({"command": ["x"], "env": {"A": "v" * 4000, "B": "v" * 4000, "C": "v" * 4000, "D": "v" * 4000,
                                "E": "v" * 400}}, "body", "env: 16405 characters in all"),
    ({"command": ["x"], "name": "n" * 101}, "name", "at most 100 characters"),
])
def test_malformed_submission_gets_a_one_line_error(api, body, field, words) -> None:
    client, _ = api
    resp = client.post("/jobs", json=body, headers=AUTH)
    assert resp.status_code == 422
    detail = resp.json()["detail"]
    assert detail.startswith(f"invalid submission: {field}: ") and words in detail
    assert "\n" not in detail


@pytest.mark.parametrize("body, message", [
    ({"command": ["x"], "min_gpus": 3, "max_gpus": 2}, "min_gpus (3) is larger than max_gpus (2)"),
    ({"command": ["x"], "gpus": 8}, "gpus (8) must lie within min_gpus..max_gpus (1..4)"),
    ({"command": ["x"], "min_gpus": 5, "max_gpus": 8}, "the job needs 5 GPUs but the cluster has 4"),
    ({"command": ["x"], "batch_size": 64, "max_batch_size": 32}, "max_batch_size (32) is smaller than batch_size (64)"),
])
def test_inconsistent_submission_is_refused_with_the_reason(api, body, message) -> None:
    client, _ = api
    resp = client.post("/jobs", json=body, headers=AUTH)
    assert resp.status_code == 400 and resp.json()["detail"] == message


def test_submit_list_schedule_cancel(api, fake_executor) -> None:
    client, loop = api
    resp = client.post("/jobs", headers=AUTH, json={
        "command": ["python", "train.py"], "gpus": 2, "batch_size": 64, "adaptive": True})
    assert resp.status_code == 201
    job = resp.json()
    assert job["id"] == "job-1" and job["status"] == "queued" and job["name"] == "train"
    assert job["spec"]["max_batch_size"] == 512 and job["spec"]["min_local_bsz"] == 8
    loop.tick()
    listed = client.get("/jobs", headers=AUTH).json()["jobs"]
    assert [(j["id"], j["status"], j["gpus"]) for j in listed] == [("job-1", "running", 2)]
    detail = client.get("/jobs/job-1", headers=AUTH).json()
    assert [e["kind"] for e in detail["events"]] == ["submitted", "started"]
    assert client.get("/jobs/job-1/logs", headers=AUTH).text == "log of job-1 rank 0\n"
    assert client.get("/jobs/nope", headers=AUTH).status_code == 404
    assert client.post("/jobs/job-1/cancel", headers=AUTH).status_code == 202
    loop.tick()
    assert client.get("/jobs/job-1", headers=AUTH).json()["status"] == "cancelled"
    again = client.post("/jobs/job-1/cancel", headers=AUTH)
    assert again.status_code == 409 and again.json()["detail"] == "job job-1 is already cancelled"


def test_the_job_list_sends_the_stored_summaries(api) -> None:
    """GET /jobs sends the summaries the loop stored; a job stored without one (an older
    service's row) is summarised from its document; a NaN is null."""
    client, loop = api
    for i in range(5):
        body = {"command": ["python", "train.py"], "name": f"j{i}"}
        assert client.post("/jobs", headers=AUTH, json=body).status_code == 201
    loop.tick()
    loop.jobs["job-2"].report = Report(time=1.0, loss=float("nan"), steps=3)
    loop.store.save_job(*loop.jobs["job-2"].record())
    loop.store.save_job(loop.jobs["job-4"].to_doc())  # no summary, as an older store's row
    listed = client.get("/jobs", headers=AUTH).json()["jobs"]
    assert [j["name"] for j in listed] == [f"j{i}" for i in range(5)]
    assert [j["status"] for j in listed] == ["running"] * 4 + ["queued"]
    assert listed[1]["loss"] is None and listed[1]["steps"] == 3  # job-2


def test_prometheus_metrics(api) -> None:
    client, loop = api
    client.post("/jobs", headers=AUTH, json={"command": ["python", "a.py"], "gpus": 3})
    loop.tick()
    text = client.get("/metrics", headers=AUTH).text
    assert 'corral_jobs{status="running"} 1.0' in text
    assert "corral_gpus_total 4.0" in text and "corral_gpus_allocated 3.0" in text
    assert 'corral_job_gpus{job="job-1"} 3.0' in text
    assert "corral_scheduling_rounds_total 1.0" in text
    cluster = client.get("/cluster", headers=AUTH).json()
    assert cluster["total_gpus"] == 4 and cluster["policy"] == "fifo"
    # without --queues the dashboard does not ask GET /queues, which answers 400 here
    assert cluster["queues"] is False
    assert client.get("/queues", headers=AUTH).status_code == 400


def test_metrics_count_completions_failures_preemptions_and_running_gpus(api, fake_executor) -> None:
    from corral.executors.base import ExecState

    client, loop = api
    for gpus in (2, 1):
        client.post("/jobs", headers=AUTH, json={"command": ["python", "a.py"], "gpus": gpus})
    loop.tick()
    fake_executor.states["job-2"] = ExecState.QUEUED  # reserved, its workers not started yet
    fake_executor.workers["job-2"] = ()
    loop.tick()
    text = client.get("/metrics", headers=AUTH).text
    assert "corral_gpus_reserved 3.0" in text and "corral_gpus_running 2.0" in text
    fake_executor.states["job-1"] = ExecState.DONE
    fake_executor.states["job-2"] = ExecState.FAILED
    loop.tick()
    text = client.get("/metrics", headers=AUTH).text
    for counter, value in (("completions", 1), ("failures", 1), ("preemptions", 0),
                           ("crash_retries", 0)):
        assert f"corral_{counter}_total {value:.1f}" in text, counter
    assert "corral_gpus_reserved 0.0" in text


def test_what_the_service_changes_in_a_submission_is_said_and_recorded(api) -> None:
    """A max_gpus over the cluster's GPUs is capped: the answer's `adjusted` says so, and so
    does an "adjusted" event of the job; a submission taken as it is has `adjusted: []`."""
    client, _ = api
    resp = client.post("/jobs", headers=AUTH, json={"command": ["python", "a.py"], "max_gpus": 1000})
    assert resp.status_code == 201
    job = resp.json()
    said = ["max_gpus capped from 1000 to 4 (the cluster has 4 GPUs)"]
    assert job["adjusted"] == said and job["spec"]["max_gpus"] == 4
    events = client.get(f"/jobs/{job['id']}", headers=AUTH).json()["events"]
    assert [(e["kind"], e["detail"]) for e in events if e["kind"] == "adjusted"] == \
        [("adjusted", said[0])]
    plain = client.post("/jobs", headers=AUTH, json={"command": ["python", "a.py"], "max_gpus": 4})
    assert plain.json()["adjusted"] == []
    assert "adjusted" not in [e["kind"] for e in
                              client.get(f"/jobs/{plain.json()['id']}", headers=AUTH).json()["events"]]


def test_a_named_arrival_is_refused_outside_a_scripted_run(api) -> None:
    client, _ = api
    resp = client.post("/jobs", headers=AUTH, json={"command": ["true"], "arrive_at_s": 1e9})
    assert resp.status_code == 400 and "only a scripted run" in resp.json()["detail"]


def test_a_scripted_run_holds_its_clock_until_every_job_is_stored_then_admits_each_on_time(
        tmp_path: Path, fake_executor) -> None:
    import threading
    import time

    from corral.executors.emulated.clock import LockstepClock

    clock = LockstepClock(1e6)
    store = Store(tmp_path / "state.db")
    loop = ControlLoop(store, fake_executor, create_policy("fifo"), interval_s=10, clock=clock,
                       start_after_jobs=2)
    client = TestClient(create_app(store, fake_executor, loop, TOKEN))
    stop = threading.Event()
    runner = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    try:
        assert loop.now_s() == 0.0  # the store's origin is the clock's start
        first = client.post("/jobs", headers=AUTH, json={"command": ["true"], "arrive_at_s": 5})
        assert first.status_code == 201
        runner.start()
        time.sleep(0.3)
        assert loop.now_s() == 0.0  # one of two jobs stored: time stands still
        late = client.post("/jobs", headers=AUTH, json={"command": ["true"], "arrive_at_s": 7})
        assert late.status_code == 201
        deadline = time.monotonic() + 10
        while loop.now_s() < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        past = client.post("/jobs", headers=AUTH, json={"command": ["true"], "arrive_at_s": 1})
        assert past.status_code == 400 and "before now" in past.json()["detail"]
        stop.set()
        runner.join(timeout=10)
        events = {(e["job_id"], e["kind"]): e["time_s"] for e in store.events()}
        # each job took part from its arrival on (a fill-in round), not when it was posted
        assert events[("job-1", "submitted")] == 5 and events[("job-1", "started")] == 5
        assert events[("job-2", "submitted")] == 7 and events[("job-2", "started")] == 7
    finally:
        stop.set()
        client.close()
        store.close()


def _first_jobs_events(tmp_path: Path, executor, policy, second: dict, kind: str) -> list:
    """job-1 (4 GPUs, min 1) alone for a round, then `second` submitted: job-1's events of
    `kind` once the next round (1 s interval) made one, within 5 s."""
    import time

    store = Store(tmp_path / "state.db")
    loop = ControlLoop(store, executor, policy, interval_s=1)
    client = TestClient(create_app(store, executor, loop, TOKEN))
    try:
        client.post("/jobs", headers=AUTH, json={"command": ["python", "a.py"], "gpus": 4,
                                                 "min_gpus": 1})
        loop.tick()
        client.post("/jobs", headers=AUTH, json={"command": ["python", "b.py"], **second})
        events: list = []
        deadline = time.monotonic() + 5
        while not events and time.monotonic() < deadline:
            loop.tick()
            events = [e for e in client.get("/jobs/job-1", headers=AUTH).json()["events"]
                      if e["kind"] == kind]
            time.sleep(0.05)
        return events
    finally:
        client.close()
        store.close()


def test_a_preemption_event_says_whose_decision_and_who_took_the_gpus(tmp_path: Path,
                                                                      fake_executor) -> None:
    from corral.core.cluster import Placement
    from corral.core.jobs import Assignment, Decision
    from corral.core.policy import Policy

    class NewestFirst(Policy):
        """Every GPU to the newest job: the others are preempted."""

        name = "newest-first"

        def decide(self, snapshot):
            newest = snapshot.jobs[-1].name
            return Decision({newest: Assignment(Placement(((0, 4),)))})

    [event] = _first_jobs_events(tmp_path, fake_executor, NewestFirst(), {"gpus": 4},
                                 "preempted")
    assert event["detail"] == "by newest-first: its 4 GPU(s) went to job-2"


def test_a_preemption_event_names_another_teams_queue_never_its_job() -> None:
    """The event is shown to the preempted job's team: a job of its own queue by id, another
    queue's job only as `a job (queue q)`."""
    from types import SimpleNamespace

    from corral.core.cluster import Placement
    from corral.core.reasons import WaitKind, WaitReason

    def job(queue):
        return SimpleNamespace(id="job-1", spec=SimpleNamespace(queue=queue),
                               reason=WaitReason(WaitKind.UNEXPLAINED, ""))

    fake = SimpleNamespace(policy=SimpleNamespace(name="pollux"),
                           jobs={"job-1": job("vision"), "job-2": job("nlp"),
                                 "job-3": job("vision")})
    fake._given_words = lambda *a: ControlLoop._given_words(fake, *a)
    takers = {0: [("job-2", "nlp")], 1: [("job-3", "vision")]}
    words = ControlLoop._preempted_words(fake, fake.jobs["job-1"], Placement(((0, 1), (1, 1))),
                                         takers)
    assert words == "by pollux: its 2 GPU(s) went to a job (queue nlp), job-3 (queue vision)"
    assert "job-2" not in words


class _Halves(Policy):
    """All four GPUs to a job alone, two each to two jobs; with `says`, why it shrinks the first
    (`Decision.shrinks`)."""

    def __init__(self, name: str, says: str | None = None) -> None:
        super().__init__(None)
        self.name, self.says = name, says

    def decide(self, snapshot):
        each = 4 // len(snapshot.jobs)
        out = {v.name: Assignment(Placement(((0, each),))) for v in snapshot.jobs}
        says = self.says
        return Decision(out, {}, {} if says is None else
                        shrink_reasons(snapshot.jobs, out, self.name, lambda v, a: says))


def test_a_shrink_event_says_whose_decision_and_who_took_the_gpus(tmp_path: Path,
                                                                  fake_executor) -> None:
    [event] = _first_jobs_events(tmp_path, fake_executor, _Halves("halves"),
                                 {"gpus": 2}, "resized")
    assert event["detail"].endswith("; by halves: its 2 GPU(s) went to job-2"), event


def test_a_shrink_event_carries_the_shrinking_policys_own_words(tmp_path: Path,
                                                                fake_executor) -> None:
    policy = _Halves("says-halves", "two jobs share the node")
    [event] = _first_jobs_events(tmp_path, fake_executor, policy, {"gpus": 2}, "resized")
    assert event["detail"].endswith("; by says-halves: its 2 GPU(s) went to job-2; "
                                    "says-halves: two jobs share the node"), event
