"""Worker processes for the train tests, forked from one server that imported torch once.

A worker of these tests is a fresh interpreter that spends about 5 s (more under load)
importing torch and torch._dynamo, which any optimizer imports, before well under a second of
training; test_ddp alone starts sixteen. A multiprocessing forkserver that has imported them
once forks each worker in milliseconds. A worker runs its job script as __main__ with its
own argv, environment and output file, and exits with the script's status (its SystemExit,
the trainer's os._exit, 1 for an exception, minus the signal that killed it), as a
`python script.py` process would; `Worker` has the part of subprocess.Popen the tests use.
The executors' tests keep real processes: starting them is part of what those tests check.
"""

from __future__ import annotations

import atexit
import faulthandler
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

#: What a tiny_job or ddp_stats_job worker imports that takes seconds. Not corral: its modules
#: read environment variables at import (CORRAL_REGROUP_TIMEOUT_S, CORRAL_DIST_TIMEOUT_S) that
#: must be each worker's own (a quarter of a second each to import). Torch's import reads none
#: that a worker's environment changes (OMP_NUM_THREADS: the jobs call torch.set_num_threads).
PRELOAD = ["torch", "torch._dynamo", "torch.nn.functional"]

_ctx = multiprocessing.get_context("forkserver")
_ctx.set_forkserver_preload(PRELOAD)


def _main(script: str, args: list[str], env: dict[str, str], log: str) -> None:
    """In the forked child: the output to `log`, the environment `env`, then the script."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    if env.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).parent))
    try:
        runpy.run_path(script, run_name="__main__")
    finally:  # as the interpreter's exit: non-daemon threads, then atexit handlers
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()


class Worker:
    """One forked worker: pid, poll(), wait(), communicate() (its output as text), kill(),
    send_signal() and returncode, as subprocess.Popen(..., stdout=PIPE, text=True) has."""

    def __init__(self, script: Path, args: Iterable[str], env: Mapping[str, str],
                 log: Path | None = None) -> None:
        """`log`: where the output goes; by default a temporary file that communicate()
        reads and removes."""
        self._own_log = log is None
        if log is None:
            fd, name = tempfile.mkstemp(prefix="forked-worker-", suffix=".log")
            os.close(fd)
            log = Path(name)
        self.log = log
        self.returncode: int | None = None
        self._text: str | None = None
        # the child runs this file as __forked_child__ (the server, started with the Python's
        # own sys.path, cannot import it by name): only stdlib names go through pickle
        spec = (str(script), list(args), dict(env), str(log))
        self._proc = _ctx.Process(target=runpy.run_path, args=(__file__,),
                                  kwargs={"init_globals": {"SPEC": spec},
                                          "run_name": "__forked_child__"})
        self._proc.start()
        self.pid = self._proc.pid

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._proc.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(str(self.log), timeout or 0)
        return self.returncode  # type: ignore[return-value]

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        self.wait(timeout)
        if self._text is None:
            self._text = self.log.read_text(errors="replace")
            if self._own_log:
                self.log.unlink()
        return self._text, None

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


if __name__ == "__forked_child__":
    _main(*SPEC)  # type: ignore[name-defined]  # noqa: F821 - given by Worker
