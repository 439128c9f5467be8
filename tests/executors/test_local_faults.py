"""The local executor when a job misbehaves or its own work fails: one job's failure never stops
the executor (its thread keeps going round), crash retries back off, a worker that ignores
SIGTERM is killed and the kill recorded, the service's secrets stay out of jobs, and every
launch is contained: a kill -9 of a worker, a cancel, or a reclaim after the service itself was
killed -9 ends every process the launch started, torchrun's trainers included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import contract  # noqa: E402  (this folder is on sys.path: conftest.py)
import pytest
from contract import END, TIMEOUT_S, launch, plan, wait_until  # noqa: E402

from corral.executors.base import ExecState, JobLaunch
from corral.executors.local import LocalExecutor
from corral.protocol.env import JobConfig


@pytest.fixture
def ex(tmp_path: Path):
    executor = LocalExecutor(tmp_path, slots=4, max_retries=1, stop_timeout_s=1, crash_grace_s=1,
                             poll_s=0.02, retry_backoff_s=0.05)
    yield executor
    executor.shutdown(timeout_s=5)


#: A working directory clear of every test's data directory ("/" holds them all, and the job
#: sandbox refuses a job whose working directory holds the data directory).
CWD = str(Path(__file__).parent)


def python_job(job_id: str, code: str, env: dict[str, str] | None = None) -> JobLaunch:
    return JobLaunch(job_id, (sys.executable, "-c", textwrap.dedent(code)), CWD, env or {},
                     JobConfig())


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_an_argument_no_process_can_take_fails_that_job_only(ex: LocalExecutor) -> None:
    ex.place(JobLaunch("nul", ("python", "-c", "print(1)\0"), CWD, {}, JobConfig()), plan(1))
    st = ex.wait_for("nul", END, TIMEOUT_S)
    assert st.state is ExecState.FAILED and "null byte" in st.message
    assert st.events and st.events[0][0] == "start-failed"
    before = ex.last_round
    ex.place(launch("after", "finish"), plan(1))  # the executor still starts and finishes jobs
    assert ex.wait_for("after", END, TIMEOUT_S).state is ExecState.DONE
    assert ex.last_round > before


def test_a_missing_working_directory_is_named(ex: LocalExecutor) -> None:
    job = JobLaunch("nocwd", (sys.executable, "-c", "pass"), "/nonexistent/dir", {}, JobConfig())
    ex.place(job, plan(1))
    st = ex.wait_for("nocwd", END, TIMEOUT_S)
    assert st.state is ExecState.FAILED
    assert st.message == "cannot start: working directory '/nonexistent/dir' does not exist"


def test_a_failure_to_signal_fails_that_job_and_frees_its_slots(ex: LocalExecutor,
                                                                monkeypatch) -> None:
    ex.place(launch("hog", "sleep"), plan(4))
    wait_until(lambda: len(ex.status("hog").workers) == 4, what="workers")

    def broken(j, signum):
        raise PermissionError("injected signal failure")

    monkeypatch.setattr(ex.workers, "signal", broken)  # the backend (corral.executors.backend)
    ex.stop("hog", cancel=True)
    st = ex.wait_for("hog", END, TIMEOUT_S)
    assert st.state is ExecState.FAILED and "injected signal failure" in st.message
    assert st.events[-1][0] == "executor-error" and not st.workers
    monkeypatch.undo()
    ex.place(launch("next", "finish"), plan(4))  # all four slots are free again
    assert ex.wait_for("next", END, TIMEOUT_S).state is ExecState.DONE


def test_crash_retries_back_off(tmp_path: Path) -> None:
    ex = LocalExecutor(tmp_path, slots=1, max_retries=1, crash_grace_s=1, poll_s=0.02,
                       retry_backoff_s=3.0)
    try:
        ex.place(launch("crashy", "crash"), plan(1))
        wait_until(lambda: ex.status("crashy").events, what="the first crash")
        st = ex.status("crashy")
        assert st.events[0] == ("retry", "restarting from the last checkpoint in 3 s "
                                         "(retry 1 of 1)")
        seen = time.monotonic()
        while time.monotonic() - seen < 1.5:  # no second launch during the back-off
            assert ex.status("crashy").launches == 1
            time.sleep(0.05)
        st = ex.wait_for("crashy", END, TIMEOUT_S)
        assert st.state is ExecState.FAILED and st.launches == 2
    finally:
        ex.shutdown(5)


def test_a_worker_that_ignores_sigterm_is_killed_and_that_is_recorded(ex: LocalExecutor) -> None:
    ex.place(python_job("stubborn", """
        import signal, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(120)
    """), plan(1))
    wait_until(lambda: "ready" in ex.files.read_log("stubborn"), what="the worker")
    ex.stop("stubborn")
    st = ex.wait_for("stubborn", [ExecState.STOPPED, *END], TIMEOUT_S)
    assert st.state is ExecState.STOPPED
    assert [k for k, _ in st.events] == ["killed"]
    assert st.events[0][1].startswith("killed at stop timeout: 1 worker(s) still running")
    assert "killed at stop timeout" in ex.files.read_log("stubborn")


def test_service_secrets_never_reach_a_job(ex: LocalExecutor, monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_TOKEN", "service-secret")
    monkeypatch.setenv("CORRAL_URL", "http://127.0.0.1:1")
    ex.place(python_job("nosecret", """
        import os, sys
        leaked = [k for k in ("CORRAL_TOKEN", "CORRAL_URL") if k in os.environ]
        sys.exit(3 if leaked or os.environ.get("MINE") != "1" else 0)
    """, {"MINE": "1"}), plan(1))
    assert ex.wait_for("nosecret", END, TIMEOUT_S).state is ExecState.DONE


# -- containment: torchrun's trainers lead sessions of their own ------------------------------

TRAINER = """
import os, time
path = os.path.join(os.environ["CORRAL_CHECKPOINT_DIR"], f"trainer-{os.environ['RANK']}.pid")
with open(path + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(path + ".tmp", path)
time.sleep(300)
"""


def torchrun_job(tmp_path: Path, job_id: str) -> JobLaunch:
    pytest.importorskip("torch")
    work = tmp_path / "work"  # beside the data directory, not above it (the job sandbox)
    work.mkdir(exist_ok=True)
    script = work / "trainer.py"
    script.write_text(TRAINER)
    return JobLaunch(job_id, (sys.executable, "-m", "torch.distributed.run", "--standalone",
                              "--nproc-per-node", "2", "--monitor-interval", "0.2", str(script)),
                     str(work), {"OMP_NUM_THREADS": "1"}, JobConfig())


def trainer_pids(ckpt: Path) -> list[int]:
    files = sorted(ckpt.glob("trainer-*.pid"))
    return [int(f.read_text()) for f in files] if len(files) == 2 else []


def wait_trainers(ckpt: Path, agent: int) -> list[int]:
    pids = wait_until(lambda: trainer_pids(ckpt), 120, "torchrun's trainers")
    assert all(os.getsid(p) != os.getsid(agent) for p in pids)  # they left the agent's session
    return pids


def test_torchrun_trainers_end_with_a_killed_agent_and_with_cancel(tmp_path: Path) -> None:
    ex = LocalExecutor(tmp_path / "data", slots=2, max_retries=1, stop_timeout_s=5,
                       crash_grace_s=1, poll_s=0.05, retry_backoff_s=0.1)
    try:
        ex.place(torchrun_job(tmp_path, "tr"), plan(1))
        ckpt = ex.files.checkpoint_dir("tr")
        agent = int(wait_until(lambda: ex.status("tr").workers, 60, "the agent")[0])
        first = wait_trainers(ckpt, agent)
        os.kill(agent, signal.SIGKILL)  # a crash of the agent: its trainers must not survive
        wait_until(lambda: all(gone(p) for p in first), 30, "the orphaned trainers to end")
        for f in ckpt.glob("trainer-*.pid"):
            f.unlink()
        st = ex.wait_for("tr", ExecState.RUNNING, 60)  # retried
        agent = int(wait_until(lambda: ex.status("tr").workers, 60, "the new agent")[0])
        second = wait_trainers(ckpt, agent)
        ex.stop("tr", cancel=True)
        st = ex.wait_for("tr", END, 60)
        assert st.state is ExecState.CANCELLED and st.crashes == 1
        wait_until(lambda: all(gone(p) for p in [agent, *second]), 30, "cancel to end them all")
    finally:
        ex.shutdown(5)


SERVICE = """
import sys, time
sys.path.insert(0, {tests!r})
from contract import wait_until
from corral.executors.local import LocalExecutor
from corral.executors.base import JobLaunch
from corral.core.cluster import Placement
from corral.executors.base import WorkerPlan
from corral.protocol.env import JobConfig
ex = LocalExecutor({data!r}, slots=2)
ex.place(JobLaunch("tr", tuple({command!r}), {cwd!r}, {{}}, JobConfig()),
         WorkerPlan(Placement(((0, 1),))))
print(wait_until(lambda: ex.status("tr").workers, 60, "the agent")[0], flush=True)
time.sleep(300)
"""


def test_a_reclaim_after_the_service_was_killed_ends_torchruns_orphans(tmp_path: Path) -> None:
    job = torchrun_job(tmp_path, "tr")
    data = tmp_path / "data"
    code = SERVICE.format(tests=str(Path(contract.__file__).parent), data=str(data),
                          command=list(job.command), cwd=job.cwd)
    service = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        agent = int(service.stdout.readline())
        trainers = wait_trainers(data / "jobs" / "tr" / "checkpoints", agent)
    finally:
        service.kill()  # kill -9: nothing of the service runs its clean-up
        service.wait(10)
    assert not gone(agent) and not any(gone(p) for p in trainers)
    os.kill(agent, signal.SIGKILL)  # and its agent crashed while no service ran: orphans left
    wait_until(lambda: gone(agent), 10, "the agent to die")
    assert not any(gone(p) for p in trainers)
    later = LocalExecutor(data, slots=2, stop_timeout_s=5)
    try:
        later.reclaim("tr", [str(agent)])
        assert all(gone(p) for p in [agent, *trainers])
    finally:
        later.shutdown(5)
