"""A loopback HTTP server for tests that download (`corral data fetch`): never a real host."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


class _Handler(SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def serve() -> Iterator[Callable[[Path], tuple[str, list[str]]]]:
    """serve(directory) -> (base URL, list of request paths): a server on 127.0.0.1 in a
    thread, shut down after the test."""
    servers = []

    def start(directory: Path) -> tuple[str, list[str]]:
        log: list[str] = []
        handler = type("Handler", (_Handler,), {"requests": log})
        server = ThreadingHTTPServer(("127.0.0.1", 0),
                                     functools.partial(handler, directory=str(directory)))
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        return f"http://127.0.0.1:{server.server_address[1]}", log

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
