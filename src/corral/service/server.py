"""`corral serve`: the store, the executor, the control loop and the API in one process.

The loop runs in a background thread, uvicorn in the main one (handling SIGINT/SIGTERM). On
shutdown every job checkpoints and stops, so the next `corral serve` on the directory resumes
them (the service logs what it stops, on stderr); after kill -9 the next one reclaims the
workers (`ControlLoop.recover`). Start-up takes the directory's `ServiceLock`, then checks
everything the user can fix (policy, port, executor), and only then writes (token, modes
0700/0600 with umask 077, database): a failed start leaves the directory as it was. Under
`--queues` the tree a `PUT /queues` kept may be in force instead of the file's
(corral.service.kept_queues).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.core.errors import CorralError
from corral.core.policy import Policy
from corral.core.queues import QueueTree, load_queues, type_capacity
from corral.executors.runtime import ExecutorRegistry
from corral.executors.sandbox import SHARED_USER_EXPOSES
from corral.executors.sandbox import available as sandbox_available
from corral.policies import create_policy
from corral.policies.tenancy import QueuedPolicy
from corral.service.endpoint import (
    ServiceLock,
    clear_address,
    resolve_token,
    secure_dir,
    store_token,
    write_address,
)
from corral.service.kept_queues import KeptQueues, StartTree
from corral.service.loop import ControlLoop, check_live_policy
from corral.service.records import note_shutdown
from corral.service.store import Store, stored_active_queues
from corral.service.tenants import (
    Tenancy,
    check_change,
    check_run_as,
    check_tree_names,
    open_for_run_as,
)

__all__ = ["ServeOptions", "serve"]

log = logging.getLogger("corral.service")


@dataclass
class ServeOptions:
    data_dir: Path
    #: the executors `executor` names one of (the CLI passes corral.executors.EXECUTORS)
    executors: ExecutorRegistry
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
    queues: Path | None = None  # a queues file: the policy runs per queue (QueuedPolicy)
    #: a scripted run (`corral emulate`): the clock moves once this many jobs are stored
    start_after_jobs: int = 0
    #: with queues on a kernel without Landlock: run jobs unsandboxed all the same
    allow_shared_user: bool = False


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


def check_sandbox(opts: ServeOptions) -> None:
    """Teams' jobs must not reach the data directory: with queues, an executor that runs real
    jobs needs the job sandbox (Landlock), unless `allow_shared_user` says to run them without
    it. A one-line CorralError saying what that would expose."""
    if opts.executor in ("local", "ray") and not sandbox_available() \
            and not opts.allow_shared_user:
        raise CorralError("cannot keep teams' jobs apart: this kernel has no Landlock, and "
                          f"{SHARED_USER_EXPOSES}; pass --allow-shared-user to run them so")


def serve(opts: ServeOptions, on_ready: Any = None) -> None:
    """Run the service until SIGINT/SIGTERM (the data directory locked all along)."""
    policy = create_policy(opts.policy, opts.policy_params)
    check_live_policy(policy)
    tree = None
    if opts.queues is not None:  # the file read and checked (but for the cluster) up front
        tree = load_queues(opts.queues)
        check_tree_names(tree)
        check_sandbox(opts)
        check_run_as(tree, opts.data_dir, opts.executor)
        policy = QueuedPolicy(lambda: create_policy(opts.policy, opts.policy_params), tree)
    _log_to_stderr()
    lock = ServiceLock(opts.data_dir)
    try:
        _serve_locked(opts, policy, on_ready, tree)
    finally:
        lock.release()


def _serve_locked(opts: ServeOptions, policy: Policy, on_ready: Any,
                  tree: QueueTree | None = None) -> None:
    import uvicorn

    from corral.service.api import create_app

    directory = opts.data_dir
    sock = _bind(opts.host, opts.port)
    try:
        runtime = opts.executors.create(opts.executor, directory, **opts.executor_options)
        executor = runtime.executor
    except BaseException:
        sock.close()
        raise
    kept = KeptQueues(directory, tree) if tree is not None else None
    start: StartTree | None = None
    if kept is not None:
        try:  # against the cluster, and the stored active jobs' queues: nothing written yet
            cluster = executor.cluster()
            total, by_type = cluster.total_gpus, type_capacity(cluster)
            kept.file_tree.validate(total, by_type)
            start = kept.choose(total, by_type)  # the tree PUT /queues kept, or the file's
            tree = start.tree
            check_change(tree, stored_active_queues(directory / "state.db"))
            check_run_as(tree, directory, opts.executor)
        except BaseException:
            sock.close()
            executor.shutdown(0)
            raise
        if isinstance(policy, QueuedPolicy):
            policy.queues = tree
    store = None
    loop: ControlLoop | None = None
    try:
        token = resolve_token(directory, opts.token)
        os.umask(0o077)
        secure_dir(directory)
        if tree is not None:
            open_for_run_as(tree, directory)
        store_token(directory, token)
        store = Store(directory / "state.db")
        tenancy = Tenancy.start(directory, store, tree) if tree is not None else None
        loop = ControlLoop(store, executor, policy, interval_s=opts.interval_s,
                           tick_s=opts.tick_s, clock=runtime.clock, fill_in=opts.fill_in,
                           start_after_jobs=opts.start_after_jobs, profile=runtime.profile)
        if kept is not None and start is not None:
            kept.apply(start, store, loop.now_s())
        app = create_app(store, executor, loop, token, stall_after_s=opts.stall_after_s,
                         check_app=runtime.check_app, tenancy=tenancy, data_dir=directory,
                         kept=kept)
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
        _shutdown(loop, executor, opts.stop_timeout_s)
        if store is not None:
            store.close()
        sock.close()


def _log_to_stderr() -> None:
    """The service's log lines (corral.service: shutdown, job errors) on stderr, INFO and up,
    unless the process configured logging itself (without this only warnings showed)."""
    logger = logging.getLogger("corral")
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("corral: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def shutdown_line(loop: ControlLoop | None, timeout_s: float) -> str:
    """What the service says as it shuts down: its active jobs, and that the running ones'
    workers are asked to checkpoint and stop (`Executor.shutdown`), to resume at the next
    start on the same data directory."""
    if loop is None:
        return "shutting down before the control loop started: no job was scheduled"
    jobs = list(loop.jobs.values())  # the loop's thread has stopped: read without its lock
    placed = [j for j in jobs if j.placement]
    gpus = sum(j.placement.num_gpus for j in placed)
    names = ", ".join(j.id for j in placed[:10]) + (", ..." if len(placed) > 10 else "")
    running = (f"{len(placed)} placed on {gpus} GPU(s) ({names}): their workers are asked to "
               f"checkpoint and stop (up to {timeout_s:g} s)" if placed
               else "none placed: no worker to stop")
    return (f"shutting down with {len(jobs)} active job(s): {running}; "
            f"{len(jobs) - len(placed)} queued; the next corral serve on this data directory "
            "requeues every active job and resumes it from its checkpoint")


def _shutdown(loop: ControlLoop | None, executor: Any, timeout_s: float) -> None:
    """Stop the executor (every job's workers asked to checkpoint and stop), logging what
    happens before and after."""
    log.info(shutdown_line(loop, timeout_s))
    if loop is not None:
        try:  # the jobs' GPUs are free from now: the next start records 0 GPUs from here
            note_shutdown(loop.store, loop.now_s())
        except Exception:  # noqa: BLE001 - the workers must be stopped all the same
            log.exception("cannot record the shutdown's time")
    started = time.monotonic()
    try:
        executor.shutdown(timeout_s)
    except BaseException:
        log.exception("the executor's shutdown failed: workers may be left running (the next "
                      "corral serve reclaims them)")
        raise
    log.info("shut down in %.1f s", time.monotonic() - started)
