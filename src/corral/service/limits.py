"""Limits of the API that keep its memory flat: the size of a request body, and how many
requests it handles at once.

Plain ASGI middleware. `BodyLimit`: a body over the limit gets 413 before anything parses it;
it also covers bodies sent without Content-Length (chunked): the body is read up to the limit
and handed on whole. Requests are small (a submission is a few KiB) and the limit is 1 MiB
(corral.service.submission.MAX_BODY_BYTES), so buffering costs nothing. `ConcurrencyLimit`:
beyond `max_requests` requests in progress, a request is answered 503 with `Retry-After: 1`
at once, before its body is read (it wraps BodyLimit), so a burst of a thousand requests holds
at most `max_requests` bodies and responses (each bounded: a body by MAX_BODY_BYTES, a page of
GET /jobs by its byte cap) instead of a thousand. Chosen over uvicorn's `limit_concurrency`,
which counts open connections (an idle keep-alive one too) and works only under uvicorn, not
in-process in the tests. `/healthz` is not counted, so a probe is answered during a burst.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["BodyLimit", "ConcurrencyLimit", "MAX_CONCURRENT"]

MAX_CONCURRENT = 64  # requests in progress at once (the thread pool runs 40 of them)

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def _reply(send: Send, status: int, detail: str,
                 headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Answers 413 to a request whose body is larger than `max_bytes`."""

    def __init__(self, app: Callable[..., Awaitable[None]], max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = f"request body larger than {self.max_bytes} bytes"
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None:
            if not length.strip().isdigit():
                await _reply(send, 400, "invalid Content-Length header")
                return
            if int(length) > self.max_bytes:
                await _reply(send, 413, too_big)
                return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await _reply(send, 413, too_big)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class ConcurrencyLimit:
    """Answers 503 (`Retry-After: 1`) to a request that arrives while `max_requests` others
    are in progress; paths in `exempt` are never refused nor counted."""

    def __init__(self, app: Callable[..., Awaitable[None]], max_requests: int,
                 exempt: frozenset[str] = frozenset({"/healthz"})) -> None:
        self.app = app
        self.max_requests = max_requests
        self.exempt = exempt
        self.in_progress = 0  # one event loop runs every call: no lock needed

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.exempt:
            await self.app(scope, receive, send)
            return
        if self.in_progress >= self.max_requests:
            await _reply(send, 503, f"busy: {self.max_requests} requests in progress; retry "
                         "in a second", ((b"retry-after", b"1"),))
            return
        self.in_progress += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_progress -= 1
