"""End to end: `corral serve` on 4 CPU slots runs real training jobs submitted at staggered
times under a policy; jobs are resized while they train, resume from their checkpoints and
reach the examples' stated accuracy. Then the faults: a worker killed with SIGKILL, the service
killed with SIGKILL and started again, an unauthenticated call, a malformed submission.

The policies are the real ones when their modules have landed (pollux, tiresias-las); until
then the elastic test policy `test-share` (tests/service/share_policy.py) stands in, so the
resize path is always exercised.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import httpx
import pytest

pytest.importorskip("torch")
pytest.importorskip("uvicorn")

import livecluster as live  # noqa: E402  (tests/service is on sys.path: conftest.py)

from corral.executors.procs import is_job_worker  # noqa: E402
from corral.policies import policy_names  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serial")]

TARGET = 0.95  # the examples' stated accuracy after their default epochs
JOB_TIMEOUT_S = 240
#: Far more epochs than a test needs (the stated accuracy takes 5): minutes of training, at
#: the example's learning rate, 0.05 (its cosine decay over so many epochs stays near the top,
#: where the example's former 0.1 diverged after 20 to 50 epochs, in a plain loop too).
LONG_RUN = ("--epochs", "200", "--lr", "0.05")
#: The same for examples/plain_sigterm.py (10 epochs take about a second here).
PLAIN_EPOCHS = "1000"
DIGITS = ["--adaptive", "--batch-size", "32", "--max-batch-size", "256", "--max-local-bsz", "64",
          "--min-local-bsz", "8", "--max-gpus", "4"]
DIGITS_FIELDS = dict(adaptive=True, batch_size=32, max_batch_size=256, max_local_bsz=64,
                     min_local_bsz=8, max_gpus=4)


#: Policy settings for these minute-long runs: Pollux's re-allocation penalty assumes the
#: restart delay it measured (30 s on its testbed), here jobs live seconds, not hours;
#: Tiresias demotes a job after 1 GPU-hour, here after 3.6 GPU-seconds (under 2 s on
#: 2 slots): a job is demoted before the next arrives, however fast the machine.
SETTINGS = {"pollux": ("--set", "restart_penalty_s=1"),
            "tiresias-las": ("--set", "threshold_gpu_h=0.001")}


def _policy(name: str) -> str:
    """The real policy when it is registered, else the elastic test policy."""
    return name if name in policy_names() else "test-share"


@pytest.fixture
def service_factory(tmp_path: Path):
    started = []

    def make(policy: str) -> live.LiveService:
        svc = live.LiveService(tmp_path / "data", policy, extra_args=SETTINGS.get(policy, ()))
        svc.data_dir.mkdir(parents=True, exist_ok=True)
        started.append(svc)
        return svc.start()

    yield make
    for svc in reversed(started):
        svc.close()


def _launches(telemetry: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for row in telemetry:
        out.setdefault(row["launch"], []).append(row)
    return out


def _resumed_after(svc, job_id: str, launch: int) -> bool:
    """A launch after `launch` reported training resumed from a checkpoint."""
    return any(r["launch"] > launch and (r["resumed_steps"] or 0) > 0
               for r in svc.client.telemetry(job_id))


def _resizes_from_checkpoint(svc, job_id: str) -> list[tuple[dict, dict]]:
    """(last report of a launch, first report of the next) where the job moved to another
    world size and resumed from a checkpoint taken after at least one epoch (45 steps)."""
    by_launch = _launches(svc.client.telemetry(job_id))
    order = sorted(by_launch)
    return [(by_launch[x][-1], by_launch[y][0]) for x, y in zip(order, order[1:])
            if by_launch[y][0]["world_size"] != by_launch[x][-1]["world_size"]
            and (by_launch[y][0]["resumed_steps"] or 0) >= 45]


def _batch_changes(svc, job_id: str) -> list[tuple[int, int, int]]:
    """(step, old total, new total) of each batch decision in the job's reports: a change of
    the total beyond the rounding of the same total split over another GPU count."""
    rows = [r for r in svc.client.telemetry(job_id) if r["total_bsz"]]
    return [(b["steps"], a["total_bsz"], b["total_bsz"]) for a, b in zip(rows, rows[1:])
            if abs(b["total_bsz"] - a["total_bsz"]) > 0.1 * a["total_bsz"]]


@pytest.mark.parametrize("policy", ["pollux"])
def test_elastic_jobs_resize_resume_and_reach_their_accuracy(service_factory, policy) -> None:
    """Every wait is for a state, never for time: the jobs are long by construction
    (LONG_RUN would take minutes), so the story happens while they train, on a fast machine
    as on a busy one; they are cancelled once it has."""
    svc = service_factory(_policy(policy))
    script, epochs = str(live.EXAMPLES / "digits_elastic.py"), LONG_RUN
    ids = [svc.submit_cli(*DIGITS, "--", sys.executable, script, *epochs)]
    svc.wait_training(ids[0], 120, steps=20)  # staggered: the next arrives while it trains
    ids.append(svc.submit("digits_elastic.py", *epochs, **DIGITS_FIELDS))
    svc.wait_training(ids[1], 120, steps=20)
    ids.append(svc.submit("digits_elastic.py", *epochs, **DIGITS_FIELDS))

    # a job is resized after training an epoch, and resumes where it was (in place, or from
    # the checkpoint taken when it was stopped)
    resized = live.wait_until(
        lambda: {i: p for i in ids if (p := _resizes_from_checkpoint(svc, i))}, JOB_TIMEOUT_S,
        "a job to be resized after training an epoch", poll_s=0.5)
    for job_id, pairs in resized.items():
        by_launch = _launches(svc.client.telemetry(job_id))
        first_loss = by_launch[min(by_launch)][0]["loss"]  # its first reported step
        for last, first in pairs:
            # the step count continues from where it was stopped, and training goes on past it
            # (an in-place launch's first report is written at the regroup, before its first
            # step: a later report of it, or of a launch after it, shows the steps it took)
            assert first["resumed_steps"] >= last["steps"]
            live.wait_until(lambda: any(
                r["launch"] >= first["launch"] and r["steps"] > first["resumed_steps"]
                for r in svc.client.telemetry(job_id)), 60, f"{job_id} to train past its resize")
            # ...and so does the loss: the resumed state's, and the new launch's over its
            # reports, below the job's first report, where a fresh start would be (one step's
            # loss right after a resize is too noisy to compare: it has been seen above it)
            losses = [r["loss"] for r in by_launch[first["launch"]] if r["loss"] is not None]
            assert first["resumed_loss"] < first_loss
            assert sum(losses) / len(losses) < first_loss, losses
    # each resize says how it was done and how long training paused (jobs --json, /metrics):
    # corral.train jobs are resized in place by default
    measured = live.wait_until(lambda: [r for i in ids for r in svc.job(i)["resizes"]], 120,
                               "a resize's pause to be measured")
    assert {r["mechanism"] for r in measured} == {"in-place"}, measured
    assert all(0 <= r["pause_s"] < 30 and r["from_gpus"] != r["to_gpus"] for r in measured)
    metrics = svc.client.metrics()
    assert 'corral_resize_pause_seconds_count{mechanism="in-place"}' in metrics
    # every job learns: the example's stated accuracy, reported as its metric
    for job_id in ids:
        live.wait_until(lambda: (svc.job(job_id)["metric"] or 0) >= TARGET, JOB_TIMEOUT_S,
                        f"{job_id} to reach accuracy {TARGET}", poll_s=0.5)
    # the adaptive jobs choose their batch sizes, and change them only after holding them for
    # the trainer's minimum (no flipping at every resize or epoch)
    from corral.perf.agent import DEFAULT_MIN_HOLD_STEPS
    changes = live.wait_until(lambda: {i: c for i in ids if (c := _batch_changes(svc, i))},
                              JOB_TIMEOUT_S, "an adaptive job to change its batch", poll_s=0.5)
    for steps in ([s for s, _, _ in c] for c in changes.values()):
        assert all(b - a >= DEFAULT_MIN_HOLD_STEPS // 2 for a, b in zip(steps, steps[1:])), changes
    svc.cancel_all(ids)


@pytest.mark.parametrize("policy", ["tiresias-las"])
def test_non_intrusive_jobs_are_stopped_and_restarted(service_factory, policy) -> None:
    """Plain scripts, long by construction (PLAIN_EPOCHS would take minutes): the first still
    trains when the others arrive, so it is preempted after demotion (or resized), not just
    queued behind; every wait is for a state, and the jobs are cancelled at the end."""
    name = _policy(policy)
    svc = service_factory(name)
    script = str(live.EXAMPLES / "plain_sigterm.py")
    ids = [svc.submit_cli("--gpus", "2", "--max-gpus", "4", "--", sys.executable, script,
                          "--epochs", PLAIN_EPOCHS)]
    svc.wait_log(ids[0], "epoch 1 ", 120)
    for _ in range(2):
        ids.append(svc.submit("plain_sigterm.py", "--epochs", PLAIN_EPOCHS, gpus=2, max_gpus=4))

    def resumed_jobs() -> list[str]:
        logs = {i: svc.client.logs(i) for i in ids}
        return [i for i, log in logs.items()
                if "checkpointed at epoch" in log and "resumed at epoch" in log]

    resumed = live.wait_until(resumed_jobs, JOB_TIMEOUT_S,
                              "a job to be preempted (or resized) and resumed")
    for job_id in resumed:
        log = svc.client.logs(job_id)
        stop_line = next(l for l in log.splitlines() if l.startswith("checkpointed at epoch"))
        epoch, step = stop_line.split()[3], stop_line.split()[5].rstrip(";")
        assert f"resumed at epoch {epoch} step {step} with" in log  # from its own checkpoint
    # a resumed job learns: an epoch's test accuracy at the script's stated target (the
    # others may wait behind the long jobs; they are not needed here)
    for job_id in resumed:
        live.wait_until(lambda: _best_epoch_accuracy(svc.client.logs(job_id)) >= TARGET,
                        JOB_TIMEOUT_S, f"{job_id} to reach accuracy {TARGET}", poll_s=0.5)
    svc.cancel_all(ids)


def _best_epoch_accuracy(log: str) -> float:
    """The best 'epoch N loss L accuracy A' line of a plain_sigterm.py log (0 before one)."""
    found = [float(l.split()[-1]) for l in log.splitlines()
             if l.startswith("epoch ") and " accuracy " in l]
    return max(found, default=0.0)


def test_faults_worker_kill_service_kill_auth_and_bad_input(service_factory) -> None:
    """Both jobs are long by construction (LONG_RUN would take minutes): they train through
    the service's kill and restart and the worker's kill, and are cancelled at the end."""
    svc = service_factory("test-share")
    a = svc.submit("digits_elastic.py", *LONG_RUN, **DIGITS_FIELDS)
    svc.wait_training(a, 120, steps=60)  # one epoch is 45 steps: a checkpoint exists
    b = svc.submit("digits_elastic.py", *LONG_RUN, **DIGITS_FIELDS)

    # unauthenticated and malformed calls, against the real server
    assert httpx.get(f"{svc.client.url}/jobs").status_code == 401
    bad = svc.cli("submit", "--batch-size", "0", "--", "python", "x.py")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().count("\n") == 0
    assert "invalid submission: batch_size:" in bad.stderr
    none = svc.cli("submit")
    assert none.returncode == 2 and "Missing argument" in none.stderr

    # kill -9 the service while both train, start it again: every job is still there
    svc.wait_training(b, 120, steps=1)
    ids_before = [j["id"] for j in svc.client.jobs()]
    last_launch = {j: max(_launches(svc.client.telemetry(j))) for j in (a, b)}
    svc.kill9()
    orphans = svc.worker_pids()
    assert any(is_job_worker(p, j) for p, j in orphans)  # still running without a service
    svc2 = service_factory("test-share")
    assert [j["id"] for j in svc2.client.jobs()] == ids_before
    assert not any(is_job_worker(p, j) for p, j in orphans)  # reclaimed: checkpointed, stopped
    # both queue again and resume from their checkpoints
    requeued = [j for j in (a, b) if "requeued" in [e["kind"] for e in svc2.job(j)["events"]]]
    assert requeued == [a, b]
    for job_id in requeued:
        live.wait_until(lambda: _resumed_after(svc2, job_id, last_launch[job_id]), 120,
                        f"{job_id} to resume from its checkpoint under the new service")

    # kill -9 one worker of a running job: it restarts from its last checkpoint
    launch_before = max(_launches(svc2.client.telemetry(b)))
    pids = [p for p, job in svc2.worker_pids() if job == b]
    os.kill(pids[-1], signal.SIGKILL)
    live.wait_until(lambda: svc2.job(b)["crashes"] >= 1, 60, "the crash to be noticed")

    live.wait_until(lambda: _resumed_after(svc2, b, launch_before), 120,
                    f"{b} to resume from its checkpoint after the crash")
    assert "worker-failure" in [e["kind"] for e in svc2.job(b)["events"]]
    for job_id in (a, b):
        live.wait_until(lambda: (svc2.job(job_id)["metric"] or 0) >= TARGET, JOB_TIMEOUT_S,
                        f"{job_id} to reach accuracy {TARGET}", poll_s=0.5)
    out = svc2.cli("jobs")
    assert out.returncode == 0 and a in out.stdout and b in out.stdout
    log = svc2.cli("logs", b)
    assert "restarting from the last checkpoint" in log.stdout
    assert "left by an earlier service" in log.stdout and "resumed from" in log.stdout
    svc2.cancel_all([a, b])


def test_sigterm_stops_the_service_cleanly_and_the_next_one_resumes(service_factory) -> None:
    svc = service_factory("test-share")
    a = svc.submit("digits_elastic.py", *LONG_RUN, **DIGITS_FIELDS)  # still trains at SIGTERM
    svc.wait_training(a, 120, steps=60)  # past its first epoch
    last_launch = max(_launches(svc.client.telemetry(a)))
    svc.proc.send_signal(signal.SIGTERM)
    assert svc.proc.wait(timeout=60) == 0
    # the workers were asked to checkpoint and stop before the service exited
    assert not any(is_job_worker(p, j) for p, j in svc.worker_pids())
    assert not (svc.data_dir / "service.json").exists()
    log = (svc.data_dir / "jobs" / a / "job.log").read_text()
    assert "(checkpointed)" in log and log.splitlines()[-1].endswith("(shutdown)"), log[-500:]

    svc2 = service_factory("test-share")
    live.wait_until(lambda: _resumed_after(svc2, a, last_launch), 120,
                    "the job to resume from the checkpoint it took on shutdown")
    live.wait_until(lambda: (svc2.job(a)["metric"] or 0) >= TARGET, JOB_TIMEOUT_S,
                    f"{a} to reach accuracy {TARGET}", poll_s=0.5)
    svc2.cancel_all([a])

