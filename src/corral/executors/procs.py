"""Worker processes on this machine: start one in its own session, signal its process group,
find and stop leftovers of an earlier service by pid.

A worker is started with `start_new_session=True`, so its pid is its process group id and a
signal to the group also reaches what the command started (a shell wrapper's python). A pid
recorded by an earlier service is trusted only if /proc shows that process carrying the job's
CORRAL_JOB_ID, so a reused pid is never signalled.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import IO, Mapping, Sequence

from corral.train.env import ENV_JOB_ID

__all__ = ["spawn", "signal_group", "free_port", "is_job_worker", "stop_pids"]


def spawn(command: Sequence[str], cwd: str, env: Mapping[str, str], log: IO[bytes]
          ) -> subprocess.Popen:
    return subprocess.Popen(list(command), cwd=cwd, env=dict(env), stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def signal_group(pid: int, sig: int) -> None:
    """Send `sig` to the process group led by `pid` (quietly if it is gone)."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for the rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # a zombie is gone for our purposes


def is_job_worker(pid: int, job_id: str) -> bool:
    """True if `pid` is alive and was started for `job_id` (its environment says so)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return _alive(pid) and f"{ENV_JOB_ID}={job_id}".encode() in environ.split(b"\0")


def stop_pids(pids: Sequence[int], timeout_s: float, poll_s: float = 0.05) -> None:
    """SIGTERM the groups of `pids`, wait up to `timeout_s` for them to exit, then SIGKILL."""
    for pid in pids:
        signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(poll_s)
    for pid in pids:
        if _alive(pid):
            signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(poll_s)
