"""Request body limit of the API: a body over the limit gets 413 before anything parses it.

Plain ASGI middleware, so it also covers bodies sent without Content-Length (chunked): the body
is read up to the limit and handed on whole. Requests are small (a submission is a few KiB) and
the limit is 1 MiB (corral.service.submission.MAX_BODY_BYTES), so buffering costs nothing.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["BodyLimit"]

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def _reply(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
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
