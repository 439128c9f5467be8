"""One job's records say the same thing wherever they are read: an in-place resize is named
"in-place" in the dashboard's launches (the telemetry it draws them from, shown as they are), in
`corral describe`, in `corral jobs --json` (the job's resizes) and in /metrics; a service
restart reads "after a service restart" in the events `corral describe` and the dashboard show
(corral.service.records)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from loopkit import Clock, make_loop, submit  # noqa: E402  (tests/service is on sys.path)

pytest.importorskip("fastapi")
with warnings.catch_warnings():  # starlette's test client warns about its httpx dependency
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient  # noqa: E402

from typer.testing import CliRunner  # noqa: E402

import corral.service.dashboard  # noqa: E402
from corral.cli.main import app as cli_app  # noqa: E402 - imports corral.cli.live
from corral.service.api import create_app  # noqa: E402
from corral.service.client import Client  # noqa: E402

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DASHBOARD_JS = Path(corral.service.dashboard.__file__).parent / "static" / "dashboard.js"


def _serve_cli(monkeypatch, web_app) -> None:
    """The CLI's client calls `web_app` in-process."""
    def client(*_):
        c = Client.__new__(Client)
        c.url = "http://testserver"
        c._http = TestClient(web_app, headers=AUTH)
        return c

    monkeypatch.setattr("corral.cli.live._client", client)


def _cli(monkeypatch, web_app, *args: str) -> str:
    """`corral ARGS` against the app in-process; its standard output."""
    _serve_cli(monkeypatch, web_app)
    result = CliRunner().invoke(cli_app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture
def resized(store, fake_executor, share_policy):
    """Job a trains on 4 GPUs (launch 0, fresh) and is resized in place to 2 when b arrives
    (launch 1: its state from the running workers, 0.25 s paused)."""
    clock = Clock()
    a = submit(store, 100, adaptive=True, max_gpus=4)
    loop = make_loop(store, fake_executor, policy="test-share", clock=clock)
    loop.tick()
    fake_executor.reports[a] = {"time": 105.0, "state": "running", "launch": 0, "world_size": 4,
                                "steps": 40, "epoch": 1, "resumed": None}
    clock.t = 105.0
    loop.tick()
    submit(store, 110, adaptive=True)
    clock.t = 111.0
    loop.tick()  # a: 4 -> 2 GPUs
    decided = loop.jobs[a].pending_resizes[0].decided
    fake_executor.reports[a] = {
        "time": 112.0, "state": "running", "launch": 1, "world_size": 2, "steps": 41,
        "epoch": 1, "first_step_time": decided + 2.0,
        "resumed": {"steps": 40, "epoch": 1, "loss": 1.5, "checkpoint": None, "in_place": 0,
                    "pause_s": 0.25}}
    clock.t = 112.0
    loop.tick()
    web_app = create_app(store, fake_executor, loop, TOKEN)
    with TestClient(web_app, headers=AUTH) as client:
        yield a, web_app, client


def test_an_in_place_resize_is_named_alike_in_the_dashboard_describe_jobs_and_metrics(
        resized, monkeypatch) -> None:
    a, web_app, client = resized
    # the dashboard: its launches table shows each launch's first report's launch_start as is
    rows = client.get(f"/jobs/{a}/telemetry").json()
    first = {}
    for row in rows:
        first.setdefault(row["launch"], row)
    assert {k: v["launch_start"] for k, v in first.items()} == {0: "fresh", 1: "in-place"}
    js = DASHBOARD_JS.read_text()
    assert 'el("td", {}, t.launch_start || "-")' in js  # shown as the service words it
    assert '"checkpoint" : "fresh"' not in js  # no longer guessed from resumed_steps
    # describe: the same word in its launches table; no launch restored a checkpoint
    described = _cli(monkeypatch, web_app, "describe", a)
    launch_rows = [ln for ln in described.splitlines() if ln.replace(" ", "").startswith("│1│")]
    assert launch_rows and "in-place" in launch_rows[0], described
    assert "checkpoint-restart" not in described
    assert "checkpoints: no launch has resumed from one" in described
    # the events both show: the resize's pause, under the same word
    events = {e["kind"]: e["detail"] for e in client.get(f"/jobs/{a}").json()["events"]}
    assert events["resize-pause"] == ("in-place: 4 -> 2 worker(s), launch 1 trained after a "
                                      "pause of 0.25 s")
    assert "resumed" not in events and "resize-pause" in described
    # jobs --json: the job's resizes name the mechanism with the same word
    listed = json.loads(_cli(monkeypatch, web_app, "jobs", "--json"))
    (resize,) = next(j for j in listed if j["id"] == a)["resizes"]
    assert resize["mechanism"] == "in-place" and resize["launch"] == 1
    # /metrics: the same word as the mechanism label, counted once
    metrics = client.get("/metrics").text
    assert 'corral_resize_pause_seconds_count{mechanism="in-place"} 1.0' in metrics
    assert 'corral_resize_pause_seconds_count{mechanism="checkpoint-restart"} 0.0' in metrics


def test_a_service_restart_reads_alike_in_the_dashboard_and_describe(
        store, fake_executor, monkeypatch) -> None:
    """Killed and restarted: the job's events (the dashboard's events table and describe's)
    say "after a service restart", and its assignments (the dashboard's GPU chart, describe's
    assignments) hold the 0-GPU interval."""
    from fakes import FakeExecutor

    clock = Clock()
    a = submit(store, 100, gpus=2)
    loop = make_loop(store, fake_executor, clock=clock)
    loop.tick()  # started at 100 s on 2 GPUs
    clock.t = 119.0
    loop2 = make_loop(store, FakeExecutor(), clock=clock)
    loop2.recover()  # the first service was killed
    clock.t = 120.0
    loop2.tick()
    web_app = create_app(store, loop2.executor, loop2, TOKEN)
    with TestClient(web_app, headers=AUTH) as client:
        job = client.get(f"/jobs/{a}").json()
    events = [(e["kind"], e["detail"]) for e in job["events"]]
    assert events[-2][0] == "requeued" and events[-2][1].startswith(
        "after a service restart: the service was killed and restarted at 119.0 s")
    assert events[-1] == ("started", "2 GPU(s) here:2, batch 16x1 (again, after a service restart)")
    assert [(x["time_s"], x["num_gpus"]) for x in job["assignments"]] == \
        [(100.0, 2), (119.0, 0), (120.0, 2)]
    described = " ".join(_cli(monkeypatch, web_app, "describe", a).split())
    assert "(again, after a service restart)" in described.replace("│ ", "").replace(" │", "")
    assert "preempt" not in described


@pytest.mark.parametrize("orderly", [False, True])
def test_a_restart_counts_its_downtime_as_run_then_queue_time(store, fake_executor,
                                                              orderly: bool) -> None:
    """A job's run and queue time add up to its age across a restart: after a kill its workers
    trained on until reclaimed (run time); after an orderly stop at 110 s they stopped there,
    and the rest of the downtime it waited (queue time)."""
    from fakes import FakeExecutor

    from corral.service.records import note_shutdown

    clock = Clock()
    a = submit(store, 100, gpus=2)
    loop = make_loop(store, fake_executor, clock=clock)
    loop.tick()  # started at 100 s
    clock.t = 105.0
    loop.tick()
    store.save_job(*loop.jobs[a].record())
    if orderly:
        note_shutdown(store, 110.0)
    clock.t = 160.0
    loop2 = make_loop(store, FakeExecutor(), clock=clock)
    loop2.recover()
    job = loop2.jobs[a]
    assert job.run_time_s + job.queue_time_s == pytest.approx(60.0)
    assert job.run_time_s == pytest.approx(10.0 if orderly else 60.0)
    clock.t = 170.0
    loop2.tick()
    assert job.run_time_s + job.queue_time_s == pytest.approx(70.0)


def test_corral_submit_says_what_the_service_changed(store, fake_executor, monkeypatch,
                                                     tmp_path) -> None:
    """`corral submit --max-gpus 1000` on 4 GPUs: the job id on stdout, the cap on stderr."""
    loop = make_loop(store, fake_executor)
    _serve_cli(monkeypatch, create_app(store, fake_executor, loop, TOKEN))
    result = CliRunner().invoke(cli_app, ["submit", "--max-gpus", "1000", "--cwd", str(tmp_path),
                                          "--", "python", "a.py"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "job-1"
    assert result.stderr.strip() == "note: max_gpus capped from 1000 to 4 (the cluster has 4 GPUs)"
