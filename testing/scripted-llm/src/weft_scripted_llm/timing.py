"""When an exchange entered the test double's app and when its last byte left it.

A pure ASGI middleware, the app's only one (inside Starlette's error handler, around
routing): ``entered_at`` is stamped before FastAPI routes the request or reads its
body, ``sent_at`` once the response's last body message was handed to the server.
Benchmarks subtract ``sent_at - entered_at`` from a round to tell the engine's time from
the time spent inside the double (a "zero-latency model").
"""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ExchangeClock:
    """Stamps ``scope["state"]["entered_at"]``; sets ``sent_at`` on the request's log
    entry, which the route leaves in ``scope["state"]["recorded"]``."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = scope.setdefault("state", {})
        state["entered_at"] = time.time()

        async def timed_send(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                entry = state.get("recorded")
                if entry is not None:
                    entry.sent_at = time.time()

        await self.app(scope, receive, timed_send)
