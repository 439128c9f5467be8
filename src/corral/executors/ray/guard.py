"""Runs one worker's command for a Ray worker actor and dies with the actor.

    python guard.py COMMAND...

A session leader with the command as its child in the same group. It ignores SIGTERM (the
command decides) and SIGKILLs the group if its parent, the actor, disappears, so a worker never
writes a checkpoint after its job restarted elsewhere; it exits as the command did. The command
also has PR_SET_PDEATHSIG, since Ray may kill the guard first. Run by path with no corral
import, to start fast.
"""

import ctypes
import os
import signal
import subprocess
import sys
import time

_POLL_S = 0.1
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _dies_with(parent: int) -> None:
    """In the command's process, before exec: SIGKILL it when `parent` (the guard) dies; if
    the guard is gone already, exit. Nothing where prctl does not exist (not Linux)."""
    try:
        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        return
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: guard.py COMMAND...\n")
        return 2
    parent = os.getppid()
    # A Python handler (not SIG_IGN, which exec would pass on to the command).
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        guard = os.getpid()
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                 preexec_fn=lambda: _dies_with(guard))
    except OSError as exc:
        sys.stderr.write(f"cannot start {argv[0]!r}: {exc.strerror or exc}\n")
        return 127
    while True:
        try:
            code = child.wait(timeout=_POLL_S)
            break
        except subprocess.TimeoutExpired:
            pass
        if os.getppid() != parent:  # the actor is gone: so is this worker
            os.killpg(0, signal.SIGKILL)
    if code < 0:  # killed by a signal: die by the same one
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # (those two take no handler)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        time.sleep(1)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
