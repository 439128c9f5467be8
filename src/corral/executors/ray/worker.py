"""The Ray actor behind one worker of a job (corral.executors.ray.executor).

One actor per worker, in its job's placement-group bundle, runs the job's command on its node
through guard.py with the executor's environment plus Ray's devices, and answers
`address()`, `start()`, `wait()`, `signal()` and `devices()`. It is threaded so `signal()`
reaches it while `wait()` blocks; a `signal()` before `start()` calls the launch off. If the
raylet dies the worker process may linger: a watchdog SIGKILLs it and exits, so a job restarted
elsewhere never races a stale copy writing checkpoints. Torch-free; imports ray only inside
methods.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from corral.executors.procs import free_port
from corral.protocol.env import STOP_EXIT_CODE

__all__ = ["WorkerActor", "GUARD"]

GUARD = Path(__file__).resolve().with_name("guard.py")
_WATCH_S = 0.2


def _missing_program(command: Sequence[str], cwd: str, env: Mapping[str, str]) -> str | None:
    """Why `command` cannot start here (None when it can, as far as can be told beforehand)."""
    if not os.path.isdir(cwd):
        return f"cannot start {command[0]!r}: working directory {cwd} does not exist on this node"
    program = command[0]
    if os.sep in program:
        path = program if os.path.isabs(program) else os.path.join(cwd, program)
        found = os.path.isfile(path) and os.access(path, os.X_OK)
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath)) is not None
    return None if found else f"cannot start {program!r}: no such executable on this node"


class WorkerActor:
    """Runs and watches one worker process (see the module docstring)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._called_off = False
        self._started = threading.Event()
        self._lock = threading.Lock()
        self._raylet_pid = os.getppid()
        threading.Thread(target=self._watch_raylet, name="corral-raylet-watchdog",
                         daemon=True).start()

    def _watch_raylet(self) -> None:
        while os.getppid() == self._raylet_pid:
            time.sleep(_WATCH_S)
        if self._proc is not None:  # the raylet is gone: so is this worker
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        os._exit(1)

    def address(self) -> tuple[str, int]:
        """This node's IP address and a TCP port that was free on it a moment ago."""
        import ray

        ip = ray.util.get_node_ip_address()
        return ip, free_port(ip)

    def devices(self) -> list[str]:
        """The GPUs Ray gave this actor (for a job that starts early on its slot)."""
        import ray

        return [str(g) for g in ray.get_gpu_ids()]

    def start(self, command: Sequence[str], cwd: str, env: Mapping[str, str], log_path: str,
              gpu: bool, devices: Sequence[str] | None = None,
              sandbox: tuple[bool | None, Sequence[str]] = (False, ())) -> dict:
        """Start the worker (on GPUs: on `devices`, else on the GPUs Ray gave this actor);
        {"pid", "node"} or {"error": one line}. `sandbox` is (mode, the directories to keep
        the job from): mode True runs the command in the job sandbox
        (corral.executors.sandbox) or refuses to start it where this node has no Landlock,
        None sandboxes it where the node has Landlock, False not at all. The job's directory
        is the log's (`<storage>/jobs/<job id>/`)."""
        import ray

        from corral.executors.sandbox import available, sandboxed

        full = dict(env)
        if gpu:
            full["CUDA_VISIBLE_DEVICES"] = ",".join(
                devices if devices is not None else [str(g) for g in ray.get_gpu_ids()])
        node = ray.get_runtime_context().get_node_id()
        try:
            with self._lock:
                if self._called_off:
                    return {"pid": None, "node": node}
                problem = _missing_program(command, cwd, full)
                if problem:
                    return {"error": problem}
                Path(log_path).parent.mkdir(parents=True, exist_ok=True)
                argv = list(command)
                mode, deny = sandbox
                if mode and not available():
                    return {"error": "cannot sandbox the job: this node's kernel has no Landlock"}
                if mode or (mode is None and available()):
                    argv, full = sandboxed(command, cwd=cwd, job_dir=str(Path(log_path).parent),
                                           env=full, deny=list(deny))
                fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o644)  # never through a link the job made
                with open(fd, "ab") as log:
                    self._proc = subprocess.Popen(
                        [sys.executable, str(GUARD), *argv], cwd=cwd, env=full, stdout=log,
                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
                return {"pid": self._proc.pid, "node": node}
        except PermissionError as exc:  # the sandbox refused it (or the program)
            return {"error": str(exc) if exc.strerror is None else
                    f"cannot start {command[0]!r}: {exc.strerror}"}
        except OSError as exc:
            return {"error": f"cannot start {command[0]!r}: {exc.strerror or exc}"}
        finally:
            self._started.set()

    def wait(self) -> int:
        """The worker's exit status, once it has exited."""
        self._started.wait()
        if self._proc is None:
            return STOP_EXIT_CODE
        return self._proc.wait()

    def signal(self, signum: int) -> None:
        """Send `signum` to the worker's process group (before start: call the launch off)."""
        with self._lock:
            if self._proc is None:
                self._called_off = True
                return
            try:
                os.killpg(self._proc.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def command_pid(self) -> int | None:
        """The pid of the job's command: the guard's child (None before it started or after
        it exited). A corral.train trainer names it in its report."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                return None
            guard = self._proc.pid
        try:
            children = Path(f"/proc/{guard}/task/{guard}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def signal_command(self, signum: int) -> bool:
        """Send `signum` to the job's command alone, not its process group (SIGUSR1 asks a
        corral.train trainer to regroup; the helper processes it started have no handler for
        it and would die of it). False when the command is not running."""
        pid = self.command_pid()
        if pid is None:
            return False
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def placement_group_hex(self) -> str | None:
        """The id of the placement group this actor runs in (for a later executor's clean-up)."""
        from ray.util import get_current_placement_group

        pg = get_current_placement_group()
        return pg.id.hex() if pg is not None else None

