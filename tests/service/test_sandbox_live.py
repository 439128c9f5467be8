"""Issue 43 end to end: on a live `corral serve --queues` (local executor, two CPU slots, teams
nlp and vision), a job submitted with nlp's token tries to read the admin token, vision's
token, state.db, vision's job log and checkpoint, the service's /proc environ, and to signal
the service: each attempt is refused, while the job's own checkpoint is written, survives a
crash and is resumed by the retry. Needs Landlock (skipped, with the reason, without); each
wait bounded at WAIT_S."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from livecluster import WAIT_S, LiveService  # noqa: E402

from corral.executors import sandbox  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serial"),
              pytest.mark.skipif(not sandbox.available(),
                                 reason="this kernel has no Landlock (no job sandbox here)")]

QUEUES = "[queue.nlp]\nquota = 1\n[queue.vision]\nquota = 1\n"

VICTIM = """
import os
ckpt = os.environ["CORRAL_CHECKPOINT_DIR"]
with open(os.path.join(ckpt, "vision.pt"), "w") as f:
    f.write("vision weights")
print("vision log line", flush=True)
"""

ATTACKER = Path(__file__).with_name("attack_job.py")  # its attempts, then a crash


def test_a_teams_job_reads_nothing_of_the_service_or_the_other_team(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    data.mkdir()
    work.mkdir()
    (work / "victim.py").write_text(VICTIM)
    (work / "attacker.py").write_text(ATTACKER.read_text())
    (tmp_path / "queues.toml").write_text(QUEUES)
    svc = LiveService(data, "fifo", slots=2, extra_args=(
        "--queues", str(tmp_path / "queues.toml"), "--max-retries", "2", "--retry-backoff",
        "0.1"))
    try:
        svc.start(timeout_s=30)
        nlp, vision = svc.tenant("nlp"), svc.tenant("vision")
        body = {"cwd": str(work), "gpus": 1}
        victim = vision.submit({"command": [sys.executable, str(work / "victim.py")], **body})["id"]
        svc.wait_all_done([victim], WAIT_S)
        assert "vision log line" in vision.logs(victim)
        attacker = nlp.submit({"command": [sys.executable, str(work / "attacker.py"), str(data),
                                           victim], **body})["id"]
        svc.wait_all_done([attacker], WAIT_S)
        log = nlp.logs(attacker)
        attempts = dict(json.loads(line.split("ATTEMPT ", 1)[1])
                        for line in log.splitlines() if line.startswith("ATTEMPT "))
        assert attempts == {"admin token": "EACCES", "vision token": "EACCES",
                            "state.db": "EACCES", "vision log": "EACCES",
                            "vision checkpoint": "EACCES", "service environ": "EACCES",
                            "signal service": "EPERM" if sandbox.abi() >= 6 else "ok",
                            "list the data directory": "EACCES"}, log
        assert 'resumed {"step": 7}' in log, log  # its own checkpoint, written and resumed
        assert svc.job(attacker)["restarts"] >= 1
        nlp.close()
        vision.close()
    finally:
        svc.close()
