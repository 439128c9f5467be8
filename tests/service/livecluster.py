"""Runs `corral serve` as a real process for the end-to-end tests, and cleans up after it.

Every wait is bounded; `close()` stops the service by its pid (SIGTERM, then SIGKILL) and kills
any worker process still alive by the pids the executor recorded (verified by the worker's
CORRAL_JOB_ID, so no unrelated process is touched).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.core.errors import CorralError
from corral.executors.procs import is_job_worker
from corral.service.client import Client
from corral.service.jobs import LiveStatus

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SHARE_POLICY = Path(__file__).resolve().parent / "share_policy.py"
CLI = [sys.executable, "-c", "from corral.cli.main import app; app()"]
#: How long a live test's wait for its jobs may take before it fails: a guard against a hang,
#: several times the quiet run, so a loaded machine makes the test slower, never failed (a
#: speed claim belongs in benchmarks/); below pytest's timeout (300 s).
WAIT_S = 200.0


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, poll_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)


class LiveService:
    """One `corral serve` process on a data directory (restartable)."""

    def __init__(self, data_dir: Path, policy: str, slots: int | str = 4, interval_s: float = 1.0,
                 extra_args: tuple[str, ...] = (), gpus: str | None = None) -> None:
        self.data_dir = data_dir
        self.gpus = gpus  # "0,1": this machine's GPUs instead of CPU slots
        self.policy = policy
        self.extra_args = tuple(extra_args)
        self.slots_arg = str(slots)  # `--slots`: N, or TYPE:N,... (CPU slots of named GPU types)
        self.slots = len(gpus.split(",")) if gpus else sum(
            int(part.rpartition(":")[2]) for part in self.slots_arg.split(","))
        self.interval_s = interval_s
        self.proc: subprocess.Popen | None = None
        self.client: Client | None = None
        self.env = {**os.environ, "CORRAL_HOME": str(data_dir), "PYTHONUNBUFFERED": "1"}
        self.env.pop("CORRAL_TOKEN", None)
        self.env.pop("CORRAL_URL", None)

    # -- the service process --------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> LiveService:
        args = [*CLI, "serve", "--policy", self.policy, "--policy-module", str(SHARE_POLICY),
                *(("--gpus", self.gpus) if self.gpus else ("--slots", self.slots_arg)),
                "--interval", str(self.interval_s), "--port", "0",
                "--report-interval", "1", "--stop-timeout", "20", "--checkpoint-interval", "3",
                *self.extra_args]
        log = open(self.data_dir / "service.log", "ab")
        self.proc = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        log.close()

        def address() -> str | None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"corral serve exited with {self.proc.returncode}: "
                                   f"{(self.data_dir / 'service.log').read_text()[-2000:]}")
            try:
                doc = json.loads((self.data_dir / "service.json").read_text())
            except (OSError, ValueError):
                return None
            return doc["url"] if doc.get("pid") == self.proc.pid else None

        url = wait_until(address, timeout_s, "the service to listen")
        token = (self.data_dir / "token").read_text().strip()
        self.client = Client(url, token, timeout_s=20)
        wait_until(lambda: self._healthy(), timeout_s, "the service to answer")
        return self

    def _healthy(self) -> bool:
        try:
            return self.client.cluster()["total_gpus"] == self.slots
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def kill9(self) -> None:
        """Kill the service outright (its workers keep running, as after a crash)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.client.close()

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for pid, job_id in self.worker_pids():
            if is_job_worker(pid, job_id):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def worker_pids(self) -> list[tuple[int, str]]:
        """(pid, job id) of the latest launch of every job, as the executor recorded them."""
        out = []
        for path in (self.data_dir / "jobs").glob("*/workers.json"):
            try:
                out += [(int(p), path.parent.name) for p in json.loads(path.read_text())]
            except (OSError, ValueError):
                pass
        return out

    # -- jobs -----------------------------------------------------------------------------
    def cli(self, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
        return subprocess.run([*CLI, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout_s, cwd=REPO)

    def submit_cli(self, *args: str) -> str:
        done = self.cli("submit", *args)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def tenant(self, queue: str) -> Client:
        """A client holding queue `queue`'s token (`--queues`: DATA_DIR/tokens/QUEUE); the
        caller closes it."""
        assert self.client is not None
        token = (self.data_dir / "tokens" / queue).read_text().strip()
        return Client(self.client.url, token, timeout_s=20)

    def submit(self, script: str, *script_args: str, client: Client | None = None,
               **fields: Any) -> str:
        """Submit examples/`script` (as the admin, or through `client`, e.g. a tenant's)."""
        body = {"command": [sys.executable, str(EXAMPLES / script), *script_args],
                "cwd": str(REPO), **fields}
        return (client or self.client).submit(body)["id"]

    def job(self, job_id: str) -> dict[str, Any]:
        return self.client.job(job_id)

    def wait_all_done(self, ids: list[str], timeout_s: float) -> list[dict[str, Any]]:
        def finished() -> list[dict[str, Any]] | None:
            jobs = {j["id"]: j for j in self.client.jobs()}
            states = [jobs[i]["status"] for i in ids]
            bad = [i for i in ids if jobs[i]["status"] in ("failed", "cancelled")]
            if bad:
                raise AssertionError(f"jobs {bad} ended {[jobs[i]['status'] for i in bad]}: "
                                     f"{[jobs[i]['message'] for i in bad]}\n"
                                     + "\n".join(self.client.logs(i)[-3000:] for i in bad))
            return [jobs[i] for i in ids] if all(s == "done" for s in states) else None

        return wait_until(finished, timeout_s, f"jobs {ids} to finish", poll_s=0.5)

    def wait_training(self, job_id: str, timeout_s: float, steps: int = 1) -> None:
        """Until the job (a corral.train job) has reported `steps` steps."""
        wait_until(lambda: self.job(job_id)["steps"] >= steps, timeout_s,
                   f"{job_id} to train {steps} steps")

    def cancel_all(self, ids: list[str], timeout_s: float = 60.0) -> None:
        """Cancel the jobs still active and wait for them to end. A job long by construction
        can still end on its own first on a fast machine (an adaptive job's epochs shorten as
        its batch grows: CI saw one done before its cleanup); the service answers 409 to
        cancel it, and 'done' is as good an end here. A failed job fails the test."""
        for job_id in ids:
            if LiveStatus(self.job(job_id)["status"]).active:
                try:
                    self.client.cancel(job_id)
                except CorralError as exc:
                    assert "is already" in str(exc), exc

        def ended() -> dict[str, str] | None:
            states = {i: self.job(i)["status"] for i in ids}
            return None if any(LiveStatus(v).active for v in states.values()) else states

        states = wait_until(ended, timeout_s, f"jobs {ids} to be cancelled")
        assert set(states.values()) <= {"cancelled", "done"}, states

    def wait_log(self, job_id: str, text: str, timeout_s: float) -> None:
        wait_until(lambda: text in self.client.logs(job_id), timeout_s, f"{text!r} in {job_id}'s log")


def final_accuracy(log: str) -> float:
    """The accuracy in the examples' last line 'final test accuracy X ...'."""
    lines = [l for l in log.splitlines() if l.startswith("final test accuracy")]
    assert lines, f"no final accuracy in the log:\n{log[-2000:]}"
    return float(lines[-1].split()[3])
