"""`corral serve`: the store, the executor, the control loop and the API in one process.

The control loop runs in a background thread; uvicorn serves the API in the main thread and
handles SIGINT/SIGTERM. On shutdown every job's workers are asked to checkpoint and stop, so the
next `corral serve` on the same data directory resumes them. A service killed outright (kill -9)
leaves its workers running; the next one reclaims them (corral.service.loop.ControlLoop.recover).

Start-up takes the data directory's lock first (corral.service.endpoint.ServiceLock: one
service per directory), then everything that can fail for a reason the user can fix - the
policy, the port, the executor - and only then writes: the token, the modes (directory 0700,
files 0600; the process's umask becomes 077, which its workers inherit), the database. So a
start that fails leaves the data directory as it found it (a first start may leave the empty
directory and its lock file).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.core.errors import CorralError
from corral.core.policy import Policy, create_policy
from corral.executors import create_backend
from corral.service.endpoint import (
    ServiceLock,
    clear_address,
    resolve_token,
    secure_dir,
    store_token,
    write_address,
)
from corral.service.loop import ControlLoop, check_live_policy
from corral.service.store import Store

__all__ = ["ServeOptions", "serve"]


@dataclass
class ServeOptions:
    data_dir: Path
    policy: str = "pollux"
    policy_params: Mapping[str, Any] = field(default_factory=dict)
    executor: str = "local"
    executor_options: Mapping[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8642
    interval_s: float = 60.0
    token: str | None = None
    stop_timeout_s: float = 30.0
    stall_after_s: float = 30.0  # /healthz answers 503 after this long without a round
    tick_s: float = 0.2  # real seconds between the control loop's looks at jobs
    fill_in: bool = True  # fill-in rounds for arrivals on idle GPUs (corral.service.loop)


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CorralError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


@contextlib.contextmanager
def _signals_end_serving() -> Iterator[None]:
    """While uvicorn serves, SIGINT and SIGTERM only end serving, so the shutdown below runs.

    uvicorn handles both itself, then raises the signal again under the handlers it found: with
    Python's default SIGTERM handler that killed the process before its workers were asked to
    checkpoint. Under these no-op handlers the second raise does nothing. Main thread only.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def serve(opts: ServeOptions, on_ready: Any = None) -> None:
    """Run the service until SIGINT/SIGTERM (the data directory locked all along)."""
    policy = create_policy(opts.policy, opts.policy_params)
    check_live_policy(policy)
    lock = ServiceLock(opts.data_dir)
    try:
        _serve_locked(opts, policy, on_ready)
    finally:
        lock.release()


def _serve_locked(opts: ServeOptions, policy: Policy, on_ready: Any) -> None:
    import uvicorn

    from corral.service.api import create_app

    directory = opts.data_dir
    sock = _bind(opts.host, opts.port)
    try:
        backend = create_backend(opts.executor, directory, **opts.executor_options)
        executor = backend.executor
    except BaseException:
        sock.close()
        raise
    store = None
    try:
        token = resolve_token(directory, opts.token)
        os.umask(0o077)
        secure_dir(directory)
        store_token(directory, token)
        store = Store(directory / "state.db")
        loop = ControlLoop(store, executor, policy, interval_s=opts.interval_s,
                           tick_s=opts.tick_s, clock=backend.clock, fill_in=opts.fill_in)
        app = create_app(store, executor, loop, token, stall_after_s=opts.stall_after_s,
                         check_app=backend.check_app)
        loop.recover()  # the last thing before the loop starts: it reclaims running workers
        host, port = sock.getsockname()[:2]
        url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        write_address(directory, url)
        stop = threading.Event()
        worker = threading.Thread(target=loop.run, args=(stop,), name="corral-control-loop",
                                  daemon=True)
        worker.start()
        if on_ready is not None:
            on_ready(url, token)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        try:
            with _signals_end_serving():
                server.run(sockets=[sock])
        finally:
            stop.set()
            worker.join(timeout=10)
    finally:
        clear_address(directory)
        executor.shutdown(opts.stop_timeout_s)
        if store is not None:
            store.close()
        sock.close()
