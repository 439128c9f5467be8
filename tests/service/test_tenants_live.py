"""Two tenants on a live `corral serve --queues` (issue 36 item 6): two slots, queues a and b of
quota 1 each. Tenant A's elastic job borrows both slots while B is idle; B submits; A is shrunk
in place to its quota and B runs on its own; neither token sees the other's job.

The emulated executor (`--mechanism in-place`: a resize keeps the job's workers, as
`corral.train` jobs on the local executor do) on a 1x2 cluster, 20 emulated seconds per real
second, under the test-only elastic policy `test-share` run per queue."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from livecluster import SHARE_POLICY, wait_until  # noqa: E402

from corral.core.errors import CorralError  # noqa: E402
from corral.service.client import Client  # noqa: E402

QUEUES = "[queue.a]\nquota = 1\n[queue.b]\nquota = 1\n"
SCALE = 20.0


def _body(name: str, gpus: int, max_gpus: int) -> dict:
    return {"command": ["emulated"], "name": name, "app": "cifar10", "gpus": gpus,
            "min_gpus": 1, "max_gpus": max_gpus, "batch_size": 128, "adaptive": True,
            "epochs": 100}


def _resizes(client: Client, job_id: str) -> list[dict]:
    return [e for e in client.job(job_id)["events"] if e["kind"] in ("started", "resized")]


def test_two_tenants_share_two_slots_and_cannot_see_each_other(tmp_path: Path) -> None:
    began = time.monotonic()
    home = tmp_path / "home"
    (tmp_path / "queues.toml").write_text(QUEUES)
    env = {**os.environ, "CORRAL_HOME": str(home)}
    env.pop("CORRAL_TOKEN", None)
    env.pop("CORRAL_URL", None)
    log = open(tmp_path / "service.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from corral.cli.main import app; app()", "serve",
         "--executor", "emulated", "--cluster", "1x2", "--time-scale", str(SCALE),
         "--mechanism", "in-place", "--policy", "test-share", "--policy-module",
         str(SHARE_POLICY), "--queues", str(tmp_path / "queues.toml"), "--interval", "10", "--report-interval", "2",
         "--port", "0"], env=env, stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL)
    log.close()
    clients: list[Client] = []
    timeline: list[tuple[float, str]] = []

    def note(what: str) -> None:
        timeline.append((time.monotonic() - began, what))

    try:
        def url() -> str | None:
            assert proc.poll() is None, (tmp_path / "service.log").read_text()[-2000:]
            try:
                doc = json.loads((home / "service.json").read_text())
            except (OSError, ValueError):
                return None
            return doc["url"] if doc.get("pid") == proc.pid else None

        address = wait_until(url, 40, "the service to listen")
        tokens = {q: (home / "tokens" / q).read_text().strip() for q in ("a", "b")}
        admin = Client(address, (home / "token").read_text().strip(), timeout_s=20)
        a, b = Client(address, tokens["a"], timeout_s=20), Client(address, tokens["b"], timeout_s=20)
        clients += [admin, a, b]
        note("service up")

        a_job = a.submit(_body("elastic-a", 1, 2))["id"]
        note(f"A submitted {a_job} (gpus 1, max 2)")
        wait_until(lambda: a.job(a_job)["gpus"] == 2, 60, "A to borrow both slots", 0.1)
        note("A holds 2 slots (1 borrowed from b's quota)")
        rows = {q["name"]: q for q in admin.queues()["queues"]}
        assert rows["a"]["used"] == 2 and rows["a"]["borrowed"] == 1 and rows["b"]["used"] == 0

        wait_until(lambda: a.job(a_job)["progress"] > 0, 60, "A to report progress", 0.1)
        progress_before = a.job(a_job)["progress"]
        b_job = b.submit(_body("gang-b", 1, 1))["id"]
        note(f"B submitted {b_job} (gpus 1)")
        wait_until(lambda: b.job(b_job)["status"] == "running", 60, "B to start", 0.1)
        note("B running")
        assert a.job(a_job)["gpus"] == 1 and a.job(a_job)["status"] == "running"
        note("A at 1 slot")
        # what each job's events say, in emulated seconds (A's shrink is measured at its
        # first report at the new size: a resize-pause event naming the mechanism)
        wait_until(lambda: any(e["kind"] == "resize-pause" and "-> 1 worker" in e["detail"]
                               for e in a.job(a_job)["events"]), 60, "A's shrink measured", 0.1)
        for who, client, job in (("A", a, a_job), ("B", b, b_job)):
            for e in client.job(job)["events"]:
                note(f"  {who} event at t={e['time_s']:.1f} emulated s: {e['kind']} "
                     f"{e['detail']}")
        # in place: A's progress was not lost (a checkpoint-restart from an older checkpoint
        # would go back), and the service records the resize as in place, with the
        # mechanism's pause (1 s), as the emulated job's first report at 1 worker says
        assert a.job(a_job)["progress"] >= progress_before > 0
        pauses = [e["detail"] for e in a.job(a_job)["events"] if e["kind"] == "resize-pause"]
        assert pauses[-1].startswith("in-place: 2 -> 1 worker(s)"), pauses
        notes = [ln for ln in a.logs(a_job).splitlines() if "worker(s) on" in ln]
        for ln in notes:
            note(f"  A's executor note: {ln.strip()}")
        assert "1 worker(s)" in notes[-1] and "(in-place)" in notes[-1], notes
        shrink = [e for e in _resizes(a, a_job) if e["kind"] == "resized"]
        assert shrink and shrink[-1]["detail"].startswith("1 GPU(s)"), _resizes(a, a_job)
        b_start = _resizes(b, b_job)[0]
        assert b_start["kind"] == "started" and b_start["time_s"] >= shrink[-1]["time_s"]
        rows = {q["name"]: q for q in admin.queues()["queues"]}
        assert (rows["a"]["used"], rows["b"]["used"], rows["a"]["borrowed"]) == (1, 1, 0)

        # isolation, both ways
        assert [j["id"] for j in a.jobs()] == [a_job]
        assert [j["id"] for j in b.jobs()] == [b_job]
        for client, other in ((a, b_job), (b, a_job)):
            for call in (client.job, client.telemetry, client.logs, client.cancel):
                with pytest.raises(CorralError, match="not in your queue"):
                    call(other)
            with pytest.raises(CorralError, match="admin token"):
                client.metrics()
        assert {j["id"] for j in admin.jobs()} == {a_job, b_job}
        metrics = admin.metrics()
        assert 'corral_queue_used_gpus{queue="a"} 1.0' in metrics
        assert 'corral_queue_borrowed_gpus{queue="a"} 0.0' in metrics
        note("isolation checked")
        cli = [sys.executable, "-c", "from corral.cli.main import app; app()"]
        done = subprocess.run([*cli, "submit", "--queue", "b", "--token", tokens["a"], "--",
                               "emulated"], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "cannot submit to queue" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        done = subprocess.run([*cli, "queues", "--json"], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert [q["name"] for q in json.loads(done.stdout)["queues"]] == ["a", "b", "default"]
        note("corral submit --queue / corral queues checked")
        for client, job in ((a, a_job), (b, b_job)):
            client.cancel(job)
    finally:
        for c in clients:
            c.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        print("\n".join(f"{t:6.2f} s  {what}" for t, what in timeline))
