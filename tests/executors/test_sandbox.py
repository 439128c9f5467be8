"""The job sandbox (corral.executors.sandbox, issue 43): a job started through the launcher
reads and writes its own working directory, job directory and TMPDIR, and is refused the
service's data directory (tokens, state.db), another job's directory, the service's
/proc/<pid>/environ and mem, and signalling the service. Each attempt is also made without the
sandbox, where it succeeds, so these tests fail without it. The refusals of a job the sandbox
cannot keep off the data directory, and of `corral serve --queues` without Landlock, need no
Landlock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from corral.core.errors import CorralError
from corral.executors import EXECUTORS, sandbox
from corral.executors.local import LocalExecutor
from corral.service import server

needs_landlock = pytest.mark.skipif(not sandbox.available(),
                                    reason="this kernel has no Landlock (no job sandbox here)")

#: Each attempt prints [name, "ok" or the errno's name]; argv[1] is the service's pid.
ATTEMPTS = textwrap.dedent("""
    import errno, json, os, signal, sys
    service, data, other = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    def attempt(name, do):
        try:
            do()
            print(json.dumps([name, "ok"]))
        except OSError as exc:
            print(json.dumps([name, errno.errorcode.get(exc.errno, str(exc.errno))]))
    def read(path):
        return lambda: open(path, "rb").read()
    def write(path):
        return lambda: open(path, "w").write("x")
    attempt("read admin token", read(os.path.join(data, "token")))
    attempt("read queue token", read(os.path.join(data, "tokens", "nlp")))
    attempt("read state.db", read(os.path.join(data, "state.db")))
    attempt("list data dir", lambda: os.listdir(data))
    attempt("read other job's log", read(os.path.join(other, "job.log")))
    attempt("read other job's checkpoint", read(os.path.join(other, "checkpoints", "ck.pt")))
    attempt("write other job's checkpoint", write(os.path.join(other, "checkpoints", "evil")))
    attempt("service environ", read(f"/proc/{service}/environ"))
    attempt("service mem", read(f"/proc/{service}/mem"))
    attempt("signal service", lambda: os.kill(service, 0))
    attempt("read own cwd", read("input.txt"))
    attempt("write own cwd", write("output.txt"))
    ckpt = os.environ["CORRAL_CHECKPOINT_DIR"]
    attempt("write own checkpoint", write(os.path.join(ckpt, "mine.pt")))
    attempt("read own checkpoint", read(os.path.join(ckpt, "mine.pt")))
    attempt("write TMPDIR", write(os.path.join(os.environ.get("TMPDIR", "/tmp"), "scratch")))
    attempt("write /dev/null", write("/dev/null"))
""")
DENIED = ["read admin token", "read queue token", "read state.db", "list data dir",
          "read other job's log", "read other job's checkpoint", "write other job's checkpoint",
          "service environ", "service mem"]
ALLOWED = ["read own cwd", "write own cwd", "write own checkpoint", "read own checkpoint",
           "write TMPDIR", "write /dev/null"]


def _layout(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """A data directory with tokens, a state.db, job `mine` and job `other` (log and
    checkpoint), and a working directory beside it: (data, own job dir, other's, cwd)."""
    data = tmp_path / "data"
    (data / "tokens").mkdir(parents=True)
    (data / "token").write_text("admin-secret\n")
    (data / "tokens" / "nlp").write_text("nlp-secret\n")
    (data / "state.db").write_bytes(b"SQLite format 3\0")
    mine, other = data / "jobs" / "mine", data / "jobs" / "other"
    (mine / "checkpoints").mkdir(parents=True)
    (other / "checkpoints").mkdir(parents=True)
    (other / "job.log").write_text("other team's log\n")
    (other / "checkpoints" / "ck.pt").write_bytes(b"weights")
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "input.txt").write_text("data\n")
    return data, mine, other, cwd


def _run(tmp_path: Path, contained: bool) -> dict[str, str]:
    data, mine, other, cwd = _layout(tmp_path)
    command = [sys.executable, "-c", ATTEMPTS, str(os.getpid()), str(data), str(other)]
    env = {"PATH": os.environ.get("PATH", os.defpath), "CORRAL_CHECKPOINT_DIR": str(mine / "checkpoints"),
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    if contained:
        command, env = sandbox.sandboxed(command, cwd=str(cwd), job_dir=str(mine), env=env,
                                         deny=[str(data)])
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(line) for line in done.stdout.splitlines())


@needs_landlock
def test_a_sandboxed_job_reaches_its_own_files_and_nothing_of_the_data_directory(
        tmp_path: Path) -> None:
    got = _run(tmp_path, contained=True)
    assert {k: got[k] for k in DENIED} == {k: "EACCES" for k in DENIED}, got
    assert {k: got[k] for k in ALLOWED} == {k: "ok" for k in ALLOWED}, got
    assert (tmp_path / "data" / "jobs" / "mine" / "tmp" / "scratch").exists()  # its TMPDIR
    assert not (tmp_path / "data" / "jobs" / "other" / "checkpoints" / "evil").exists()
    if sandbox.abi() >= 6:
        assert got["signal service"] == "EPERM"


def test_the_same_job_unsandboxed_reaches_all_of_it(tmp_path: Path) -> None:
    """The control: the attempts above succeed without the sandbox (environ and mem of one's
    own parent are readable to the same user), so the refusals are the sandbox's."""
    got = _run(tmp_path, contained=False)
    assert {k: got[k] for k in DENIED if k != "service mem"} == \
        {k: "ok" for k in DENIED if k != "service mem"}, got
    assert got["signal service"] == "ok"


@needs_landlock
def test_a_link_the_job_makes_opens_nothing_outside(tmp_path: Path) -> None:
    """A symbolic link in its own directory to the token is refused when the job follows it,
    and the service, reading the job's log, does not follow it either."""
    data, mine, _, cwd = _layout(tmp_path)
    script = ("import os\nos.symlink(os.path.join(os.environ['D'], 'token'), 'job.log')\n"
              "open('job.log').read()\n")
    command, env = sandbox.sandboxed([sys.executable, "-c", script], cwd=str(mine),
                                     job_dir=str(mine), env={"D": str(data)}, deny=[str(data)])
    done = subprocess.run(command, cwd=mine, env=env, capture_output=True, text=True, timeout=60)
    assert "PermissionError" in done.stderr and (mine / "job.log").is_symlink()
    ex = LocalExecutor(data, slots=1, sandbox=True)
    try:
        assert ex.files.read_log("mine") == ""  # not the admin token
    finally:
        ex.shutdown(1)


def test_a_job_whose_working_directory_holds_the_data_directory_is_refused(
        tmp_path: Path) -> None:
    data, mine, _, _ = _layout(tmp_path)
    with pytest.raises(PermissionError) as raised:
        sandbox.sandboxed([sys.executable, "-c", "pass"], cwd=str(tmp_path), job_dir=str(mine),
                          env={}, deny=[str(data)])
    message = str(raised.value)
    assert "\n" not in message and f"holds the service's data directory {data}" in message
    with pytest.raises(PermissionError, match="lies in the service's data directory"):
        sandbox.sandboxed([sys.executable, "-c", "pass"], cwd=str(data / "jobs" / "other"),
                          job_dir=str(mine), env={}, deny=[str(data)])
    with pytest.raises(FileNotFoundError):  # as an unwrapped start would
        sandbox.sandboxed(["/nonexistent/program"], cwd=str(mine), job_dir=str(mine), env={},
                          deny=[str(data)])


def test_serve_with_queues_refuses_to_start_without_landlock(tmp_path: Path,
                                                             monkeypatch) -> None:
    monkeypatch.setattr(server, "sandbox_available", lambda: False)
    opts = server.ServeOptions(data_dir=tmp_path, executors=EXECUTORS, executor="local", queues=tmp_path / "q.toml")
    with pytest.raises(CorralError) as raised:
        server.check_sandbox(opts)
    assert "\n" not in str(raised.value) and "--allow-shared-user" in str(raised.value)
    assert "admin and queue tokens" in str(raised.value)
    server.check_sandbox(server.ServeOptions(data_dir=tmp_path, executors=EXECUTORS, executor="local",
                                             allow_shared_user=True))
    server.check_sandbox(server.ServeOptions(data_dir=tmp_path, executors=EXECUTORS, executor="emulated"))
    monkeypatch.setattr(server, "sandbox_available", lambda: True)
    server.check_sandbox(opts)


def test_without_landlock_the_abi_is_zero_and_apply_refuses(monkeypatch) -> None:
    monkeypatch.setattr(sandbox, "abi", lambda: 0)
    assert not sandbox.available()
    with pytest.raises(OSError, match="Landlock is not available"):
        sandbox.apply([], [])


def test_a_job_may_read_corral_wherever_it_is_installed() -> None:
    """An editable install (`pip install -e`, as CI's) keeps corral's source outside
    site-packages: a sandboxed corral.train job could not import it (ModuleNotFoundError)."""
    import corral
    from corral.executors.sandbox import read_paths

    root = str(Path(corral.__file__).resolve().parents[1])
    assert root in read_paths(["python", "train.py"], {})


@needs_landlock
def test_a_script_imports_its_siblings_from_any_working_directory(tmp_path: Path) -> None:
    """`python /abs/train.py` run from another directory imports `/abs/common.py` (Python's
    path starts at the script's folder): that folder is readable, the data directory is not,
    and a script kept beside the data directory still cannot open it."""
    data, mine, other, cwd = _layout(tmp_path)
    code = tmp_path / "code"
    code.mkdir()
    (code / "common.py").write_text("VALUE = 42\n")
    (code / "train.py").write_text(
        "import sys\nfrom common import VALUE\nprint(VALUE)\n"
        "try:\n    open(sys.argv[1]).read()\n    print('token read')\n"
        "except PermissionError:\n    print('token refused')\n")
    command, env = sandbox.sandboxed([sys.executable, str(code / "train.py"),
                                      str(data / "token")], cwd=str(cwd), job_dir=str(mine),
                                     env={"PATH": os.environ.get("PATH", os.defpath)},
                                     deny=[str(data)])
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines() == ["42", "token refused"], done.stderr
    # a script in the data directory's parent: its folder would hold the data directory, so
    # only the file itself is readable (its sibling import fails), the data stays closed
    (tmp_path / "train.py").write_text("import common\n")
    (tmp_path / "common.py").write_text("")
    command, env = sandbox.sandboxed([sys.executable, str(tmp_path / "train.py")], cwd=str(cwd),
                                     job_dir=str(mine), env={}, deny=[str(data)])
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert "ModuleNotFoundError" in done.stderr or "PermissionError" in done.stderr, done.stderr
