"""A header-read timeout for uvicorn's httptools protocol (slowloris).

uvicorn bounds the idle time between requests (``timeout_keep_alive``), but that timer is
reset by every byte received, and nothing bounds how long a request's head may take: a
client that sends its headers a byte at a time holds a connection (and a file
descriptor) for as long as it likes. ASGI middleware cannot help, since the app only
sees a request once its headers are complete.

:func:`header_deadline_protocol` subclasses the protocol: a timer starts when the
connection opens and when a request's first byte arrives, stops when the request's
headers are complete, and closes the connection when it fires first. Bodies and
responses (SSE streams) are not affected: the body is bounded by ``BodyLimit``
(``weft_platform.body_limit``), a slow reader of a response by the SSE send timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = structlog.get_logger(__name__)


class HeaderDeadlineProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` that closes a connection whose request head is not complete
    within ``header_timeout_s``."""

    header_timeout_s: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_timer is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timeout)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            log.info("slow_client_closed", client=self.client, timeout_s=self.header_timeout_s)
            self.transport.close()


def header_deadline_protocol(timeout_s: float) -> type[HeaderDeadlineProtocol]:
    """The protocol class for uvicorn's ``http`` option, with this timeout."""
    return type(
        "HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"header_timeout_s": timeout_s}
    )
