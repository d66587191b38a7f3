"""ASGI middleware capping request bodies (413 above the cap): the gateway's public API,
and internal APIs such as memory's.

A body is refused before it is read when its ``Content-Length`` says it is too large,
and while it streams when it has none: ``InternalAuth`` reads a JSON body to check the
tenant it names, so without a cap a neighbour could make a service buffer any size.
"""

from __future__ import annotations

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    """413 for a declared or streamed request body above ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise HTTPException(413, self._reason())
            return message

        await self.app(scope, counting_receive, send)

    def _reason(self) -> str:
        return f"request body larger than {self.max_bytes} bytes"

    async def _refuse(self, send: Send) -> None:
        body = f'{{"detail":"{self._reason()}"}}'.encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})
