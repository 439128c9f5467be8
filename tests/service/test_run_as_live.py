"""A queue's `run_as` (issue 43 item 1): on a live `corral serve --queues` run as root, a job of
queue nlp (`run_as = "nobody"`) runs as that user: it reads none of the data directory (the
tokens and state.db stay root's, 0600; the data directory is 0711, traverse-only) nor the
other team's files, yet writes its own checkpoint, crashes and resumes from it. Each wait
bounded at WAIT_S; skipped, saying why, where the service cannot run as root or the user cannot run a
Python (/usr/bin/python3: the service's own may sit under root's home)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from livecluster import WAIT_S, LiveService  # noqa: E402

from corral.executors import sandbox  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serial")]

USER = "nobody"
PYTHON = "/usr/bin/python3"
QUEUES = f'[queue.nlp]\nquota = 1\nrun_as = "{USER}"\n[queue.vision]\nquota = 1\n'
VICTIM = ("import os; open(os.path.join(os.environ['CORRAL_CHECKPOINT_DIR'], 'vision.pt'), 'w')"
          ".write('vision weights'); print('vision log line', flush=True)")


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "the service must run as root to start jobs as another user"
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return f"no user {USER!r} here"
    if not os.access(PYTHON, os.X_OK):
        return f"{PYTHON} is not here"
    probe = subprocess.run([sys.executable, "-I", str(sandbox.LAUNCHER), "--user", USER,
                            "--no-landlock", "--", PYTHON, "-c", "pass"], capture_output=True,
                           timeout=30)
    return None if probe.returncode == 0 else f"user {USER} cannot run {PYTHON} here"


@pytest.fixture
def places():
    """A data directory and a working directory under /tmp, as an operator would choose them
    (pytest's own temporary folders are 0700: no other user passes through them)."""
    root = Path(tempfile.mkdtemp(prefix="corral-run-as-"))
    try:
        root.chmod(0o755)
        (root / "data").mkdir()
        (root / "work").mkdir(mode=0o755)
        (root / "work").chmod(0o777)  # the job's working directory: its user writes there
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_queues_jobs_run_as_its_user_and_reach_nothing_of_the_service(places: Path) -> None:
    why = _why_not()
    if why:
        pytest.skip(why)
    data, work = places / "data", places / "work"
    attacker_script = work / "attack_job.py"
    shutil.copy(Path(__file__).with_name("attack_job.py"), attacker_script)
    attacker_script.chmod(0o644)
    (places / "queues.toml").write_text(QUEUES)
    svc = LiveService(data, "fifo", slots=2, extra_args=(
        "--queues", str(places / "queues.toml"), "--max-retries", "2", "--retry-backoff", "0.1",
        "--allow-shared-user"))
    try:
        svc.start(timeout_s=30)
        assert stat.S_IMODE(data.stat().st_mode) == 0o711  # traverse-only for the user
        assert stat.S_IMODE((data / "token").stat().st_mode) == 0o600
        nlp, vision = svc.tenant("nlp"), svc.tenant("vision")
        body = {"cwd": str(work), "gpus": 1}
        victim = vision.submit({"command": [PYTHON, "-c", VICTIM], **body})["id"]
        svc.wait_all_done([victim], WAIT_S)
        whoami = nlp.submit({"command": [PYTHON, "-c", "import os; print('uid', os.getuid())"],
                             **body})["id"]
        attacker = nlp.submit({"command": [PYTHON, str(attacker_script), str(data), victim],
                               **body})["id"]
        svc.wait_all_done([whoami, attacker], WAIT_S)
        assert f"uid {pwd.getpwnam(USER).pw_uid}" in nlp.logs(whoami)
        log = nlp.logs(attacker)
        attempts = dict(json.loads(line.split("ATTEMPT ", 1)[1])
                        for line in log.splitlines() if line.startswith("ATTEMPT "))
        assert attempts and all(got in ("EACCES", "EPERM") for got in attempts.values()), log
        assert 'resumed {"step": 7}' in log, log  # its own checkpoint, written and resumed
        owner = (data / "jobs" / attacker / "checkpoints" / "state.json").stat().st_uid
        assert owner == pwd.getpwnam(USER).pw_uid
        assert "vision log line" in vision.logs(victim)  # vision's jobs: the service's user
        nlp.close()
        vision.close()
    finally:
        svc.close()


def test_run_as_is_refused_in_one_line_where_it_cannot_hold(tmp_path: Path) -> None:
    from corral.core.errors import InputError
    from corral.core.queues import parse_queues
    from corral.service.tenants import check_run_as

    tree = parse_queues('[queue.a]\nrun_as = "no-such-user-here"\n', "q.toml", 4)
    with pytest.raises(InputError, match="ray executor's workers run as their own user"):
        check_run_as(tree, tmp_path / "data", "ray")
    if os.geteuid() == 0:
        with pytest.raises(InputError, match='queue "a": run_as = "no-such-user-here": no such '
                                             "user"):
            check_run_as(tree, tmp_path / "data", "local")
        shut = tmp_path / "shut"
        shut.mkdir(mode=0o700)
        nobody = parse_queues(f'[queue.a]\nrun_as = "{USER}"\n', "q.toml", 4)
        with pytest.raises(InputError, match=f"{shut} is 700, not searchable by others"):
            check_run_as(nobody, shut / "data", "local")
    else:
        with pytest.raises(InputError, match="needs corral serve to run as root"):
            check_run_as(tree, tmp_path / "data", "local")
    with pytest.raises(InputError, match="run_as must be a Unix user's name"):
        parse_queues('[queue.a]\nrun_as = "../etc"\n', "q.toml", 4)
