"""HTTP request metrics of a service app, labelled by route template.

The route label is the template FastAPI matched (``/v1/sessions/{session_id}/turns``),
never the raw path: a path carries session and document ids, and one series per id would
grow without bound. A request no route matched counts as ``unmatched``.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from weft_platform.metrics import HTTP_REQUEST_DURATION, HTTP_REQUESTS

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods labelled by name; any other (a client may send any token) counts as ``other``."""

UNMATCHED = "unmatched"
"""The route label of a request no route matched (404s, probes of random paths)."""


def route_template(scope: Scope) -> str:
    """The matched route's path template, or :data:`UNMATCHED` (the metrics' route label
    and the access log's and span's route: never the raw path)."""
    route = scope.get("route")
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


EVENT_STREAM = b"text/event-stream"


def _is_event_stream(message: Message) -> bool:
    return any(
        name.lower() == b"content-type" and value.split(b";")[0].strip() == EVENT_STREAM
        for name, value in message.get("headers", ())
    )


class HttpMetrics:
    """ASGI middleware counting requests and observing their duration: until the response
    ended, except for a Server-Sent Events stream, whose duration is its time to open (a
    stream lives for minutes; its life would land in the top bucket and hide the opening
    latency a client waits for; the SSE metrics follow the stream itself)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an exception before the response started
        opened: float | None = None  # when an event stream's response started

        async def send_status(message: Message) -> None:
            nonlocal status, opened
            if message["type"] == "http.response.start":
                status = int(message["status"])
                if _is_event_stream(message):
                    opened = time.perf_counter()
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            method = scope["method"] if scope["method"] in METHODS else "other"
            route = route_template(scope)
            HTTP_REQUESTS.labels(method, route, str(status)).inc()
            ended = opened if opened is not None else time.perf_counter()
            HTTP_REQUEST_DURATION.labels(method, route).observe(ended - started)
