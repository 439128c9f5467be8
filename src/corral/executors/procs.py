"""Worker processes on this machine: start one contained, signal it, and end every process a
launch started, also after the service that started it was killed.

Each worker leads its own session (its pid is its process group, so a group signal reaches a
shell wrapper's python) and carries a launch tag (ENV_LAUNCH_TAG) every descendant inherits,
even one that starts its own session (torchrun's trainers): `tagged_pids` finds them in /proc,
`end_launch` kills them. The tag is recorded with the pids (workers.json) for a later service
to reclaim by; a recorded pid is signalled only if /proc shows it carrying the job's
CORRAL_JOB_ID or the tag, so a reused pid is never hit.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from corral.protocol.env import ENV_JOB_ID

__all__ = ["spawn", "signal_group", "free_port", "ephemeral_ports", "is_job_worker", "stop_pids", "new_launch_tag",
           "tagged_pids", "end_launch", "ENV_LAUNCH_TAG"]

#: Environment variable naming the launch a process belongs to (set by the local executor).
ENV_LAUNCH_TAG = "CORRAL_LAUNCH_TAG"


def new_launch_tag(job_id: str) -> str:
    """A tag no other launch, of this or any other service, carries."""
    return f"{job_id}.{secrets.token_hex(8)}"


def spawn(command: Sequence[str], cwd: str, env: Mapping[str, str], log: IO[bytes]
          ) -> subprocess.Popen:
    """Start one worker in a session of its own, its output to `log`."""
    return subprocess.Popen(list(command), cwd=cwd, env=dict(env), stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def signal_group(pid: int, sig: int) -> None:
    """Send `sig` to the process group led by `pid` (quietly if it is gone)."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


#: Where the kernel takes outgoing connections' source ports when it does not say (Linux's
#: default net.ipv4.ip_local_port_range).
_EPHEMERAL_DEFAULT = (32768, 60999)
_LISTEN_FLOOR = 20000  # rendezvous ports are drawn from here up to the ephemeral range


def ephemeral_ports() -> tuple[int, int]:
    """The range the kernel draws outgoing connections' source ports from."""
    try:
        low, high = (int(v) for v in
                     Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return _EPHEMERAL_DEFAULT


def free_port(host: str = "127.0.0.1", tries: int = 64) -> int:
    """A TCP port on `host` that was free a moment ago, for a rendezvous: outside the ephemeral
    range. A port the kernel handed out by bind(0) lies inside it, and a worker that connects to
    it before its listener is up (rank 1 retrying while rank 0 still imports torch) can draw
    that same port as its source port: on loopback that is a TCP self-connect (simultaneous
    open), the client talks to itself and the rendezvous hangs. Source ports never come from
    outside the range, so a listener there cannot be taken that way."""
    low, high = ephemeral_ports()
    span = (_LISTEN_FLOOR, low - 1) if low - 1 > _LISTEN_FLOOR else (high + 1, 65535)
    for _ in range(tries if span[1] > span[0] else 0):
        port = span[0] + secrets.randbelow(span[1] - span[0] + 1)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue  # in use: draw again
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # all taken: any free port
        s.bind((host, 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # a zombie is gone for our purposes


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def is_job_worker(pid: int, job_id: str) -> bool:
    """True if `pid` is alive and was started for `job_id` (its environment says so)."""
    return f"{ENV_JOB_ID}={job_id}".encode() in _environ(pid) and _alive(pid)


def tagged_pids(tag: str) -> list[int]:
    """Live processes (of this user) whose environment carries launch tag `tag`."""
    entry = f"{ENV_LAUNCH_TAG}={tag}".encode()
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me and entry in _environ(int(name)) \
                and _alive(int(name)):
            found.append(int(name))
    return sorted(found)


def _wait_gone(pids: Sequence[int], timeout_s: float, poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(poll_s)


def end_launch(tag: str, timeout_s: float = 5.0) -> list[int]:
    """SIGKILL every process still carrying launch tag `tag` (and its group); wait until they
    are gone (bounded). Returns the pids it killed."""
    pids = tagged_pids(tag)
    for pid in pids:
        signal_group(pid, signal.SIGKILL)
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    _wait_gone(pids, timeout_s)
    return pids


def stop_pids(pids: Sequence[int], timeout_s: float, poll_s: float = 0.05) -> None:
    """SIGTERM the groups of `pids`, wait up to `timeout_s` for them to exit, then SIGKILL."""
    for pid in pids:
        signal_group(pid, signal.SIGTERM)
    _wait_gone(pids, timeout_s, poll_s)
    for pid in pids:
        if _alive(pid):
            signal_group(pid, signal.SIGKILL)
    _wait_gone(pids, 5.0, poll_s)
