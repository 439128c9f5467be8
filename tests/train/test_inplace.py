"""In-place resize of a corral.train job (corral.protocol.inplace, ONES §3.3.1) driven the way an
executor drives it: real worker processes on gloo, new workers that build their model and wait,
a resize request, SIGUSR1 to the old workers. Growing and shrinking continue the uninterrupted
run exactly (same weights: the stream position and total batch carry over, no checkpoint on
the path); a new worker that dies makes the job fall back to checkpoint-restart with nothing
lost. Each old worker holds at a step until the request exists, so nothing races."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from corral.executors.procs import free_port  # noqa: E402
from corral.protocol.env import ENV_CONFIG, STOP_EXIT_CODE, JobConfig, WorkerEnv  # noqa: E402
from corral.protocol.inplace import (  # noqa: E402
    ENV_CONTROL_DIR,
    ENV_JOIN_GENERATION,
    LEAVE_EXIT_CODE,
    ResizeRequest,
    ready_ranks,
    write_request,
)
from corral.protocol.report import Report  # noqa: E402
from corral.train.checkpoint import CheckpointStore  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forked import Worker  # noqa: E402  (workers forked from one torch import)
from test_resume import JOB, finish, reference, run_job  # noqa: E402,F401  (reference: a fixture)

# one xdist group: the module fixture (an uninterrupted reference run) runs once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("train_inplace")]

TIMEOUT_S = 120
HOLD_AT = 10
#: The workers' regroup timeout (CORRAL_REGROUP_TIMEOUT_S, also their new process group's for
#: every collective after): generous where the regroup must succeed, however loaded the
#: machine; short where a dead new worker makes it fail (the fallback is then the only outcome,
#: however loaded the machine: each old worker falls back on its own when its wait runs out).
PATIENT_S, FAILING_S = 120, 3


def _start(rank: int, world: int, port: int, config: JobConfig, control: Path, *args: str,
           join: int | None = None, regroup_s: int = PATIENT_S) -> Worker:
    env = {**os.environ, ENV_CONFIG: config.to_json(), "OMP_NUM_THREADS": "1",
           ENV_CONTROL_DIR: str(control), "CORRAL_REGROUP_TIMEOUT_S": str(regroup_s),
           **WorkerEnv(rank=rank, world_size=world, local_rank=rank, local_world_size=world,
                       master_port=port, backend="gloo").to_env()}
    if join is not None:
        env[ENV_JOIN_GENERATION] = str(join)
    return Worker(JOB, args, env)


def _wait_until(predicate, procs, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        assert all(p.poll() is None for p in procs), [p.communicate()[0] for p in procs]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _wait_ready(control: Path, generation: int, ranks: set[int], procs) -> None:
    _wait_until(lambda: ranks <= ready_ranks(control, generation), procs,
                "the new workers to be ready")


def _resize(tmp_path: Path, old: int, new: int, kill_new: bool = False, *job_args: str):
    """Run tiny_job on `old` workers, resize it in place to `new` at step HOLD_AT."""
    control, out = tmp_path / "control", tmp_path / "w.json"
    control.mkdir()
    report = tmp_path / "report.json"
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, checkpoint_dir=str(tmp_path),
                       report_path=str(report), report_interval_s=0.0)
    request_file = control / "resize-g1.json"
    args = ("--out", str(out), "--hold-at-step", str(HOLD_AT), "--hold-file", str(request_file),
            *job_args)
    port0, port1 = free_port(), free_port()
    regroup_s = FAILING_S if kill_new else PATIENT_S
    olds = [_start(r, old, port0, config.replace(batch=(16 // old, 0)), control, *args,
                   regroup_s=regroup_s) for r in range(old)]
    joiners = [_start(r, new, port1, config.replace(batch=(16 // new, 0), launch=1), control,
                      *args, join=1, regroup_s=regroup_s) for r in range(old, new)]
    _wait_ready(control, 1, set(range(old, new)), olds + joiners)
    _wait_until(lambda: ((Report.read(report) or Report()).steps or 0) >= HOLD_AT, olds,
                "the old workers to reach the hold step")  # their SIGUSR1 handler is in place
    if kill_new:
        joiners[0].kill()
    ranks = {r: (r if r < new else None) for r in range(old)}
    write_request(control, ResizeRequest(1, new, "127.0.0.1", port1, ranks,
                                         batch=(16 // new, 0), launch=1))
    for p in olds:
        p.send_signal(signal.SIGUSR1)
    return finish(olds), finish(joiners), out


def _same_weights(result: dict, reference: dict) -> None:
    for a, b in zip(result["weights"], reference["weights"]):
        assert a == pytest.approx(b, abs=1e-5)


def test_grow_in_place_continues_the_uninterrupted_run(reference: dict, tmp_path: Path) -> None:
    olds, joiners, out = _resize(tmp_path, 2, 4)
    assert [c for c, _ in olds + joiners] == [0, 0, 0, 0], olds + joiners
    assert "resized in place from 2 to 4 workers" in olds[0][1]
    result = json.loads(out.read_text())
    assert result["steps"] == reference["steps"]
    _same_weights(result, reference)
    assert not any(p.name.endswith(".corrupt") for p in tmp_path.iterdir())
    # the pause, phase by phase, and the first step at the new size that ends it
    report = Report.read(tmp_path / "report.json")
    assert report is not None and report.resumed is not None and report.first_step_time
    (event,) = [e for e in report.events if e["kind"] == "resized-in-place"]
    resumed = report.resumed
    assert list(event["phases"]) == ["leave", "rendezvous", "state", "wrap", "batch"]
    assert sum(event["phases"].values()) == pytest.approx(event["pause_s"], abs=0.01)
    assert resumed["phases"] == event["phases"] and resumed["first_step_s"] > 0
    # the new worker set's first step is a step it took, after the regroup
    assert report.first_step_time >= event["time"] + resumed["first_step_s"] - 0.05


@pytest.fixture(scope="module")
def adam_reference(tmp_path_factory) -> dict:
    """The uninterrupted run with Adam (its state: two moments and a step count per tensor)."""
    out = tmp_path_factory.mktemp("adam-ref") / "w.json"
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, batch=(16, 0))
    [(code, text)] = run_job(1, config, "--out", str(out), "--adam")
    assert code == 0, text
    return json.loads(out.read_text())


def test_grow_in_place_with_adam_carries_its_whole_state(adam_reference: dict,
                                                         tmp_path: Path) -> None:
    olds, joiners, out = _resize(tmp_path, 1, 2, False, "--adam")
    assert [c for c, _ in olds + joiners] == [0, 0], olds + joiners
    _same_weights(json.loads(out.read_text()), adam_reference)


def test_shrink_in_place_lets_the_leaving_worker_go(reference: dict, tmp_path: Path) -> None:
    olds, _, out = _resize(tmp_path, 2, 1)
    assert [c for c, _ in olds] == [0, LEAVE_EXIT_CODE], olds
    assert "left the job in an in-place resize" in olds[1][1]
    _same_weights(json.loads(out.read_text()), reference)


def test_a_new_worker_that_dies_falls_back_to_checkpoint_restart(reference: dict,
                                                                 tmp_path: Path) -> None:
    olds, _, out = _resize(tmp_path, 2, 4, kill_new=True)
    assert [c for c, _ in olds] == [STOP_EXIT_CODE, STOP_EXIT_CODE], olds
    assert "checkpointing for a restart instead" in olds[0][1]
    stopped = CheckpointStore(tmp_path).load()[0]["trainer"]["steps"]
    assert stopped > HOLD_AT  # the state of the last step, not an older checkpoint
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, checkpoint_dir=str(tmp_path),
                       batch=(8, 0), launch=2)
    results = run_job(2, config, "--out", str(out))
    assert [c for c, _ in results] == [0, 0], results
    _same_weights(json.loads(out.read_text()), reference)
