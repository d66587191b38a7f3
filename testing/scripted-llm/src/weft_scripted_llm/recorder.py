"""The log of requests received, for tests to assert on (`GET /_requests`)."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

MAX_RECORDED = 1000


@dataclass
class RecordedRequest:
    path: str
    body: Any
    conversation_key: str | None
    received_at: float
    """Epoch seconds, once the body was read."""
    answered_at: float | None = None
    """Epoch seconds when the handler handed its response to the server (for a paced
    stream, when the stream started); None while it has not (or for a 400). Benchmarks
    take `answered_at - received_at` as the double's own service time."""
    entered_at: float | None = None
    """Epoch seconds when the request entered the app, before routing and the body
    (`timing.ExchangeClock`); None when the app runs without it."""
    sent_at: float | None = None
    """Epoch seconds when the response's last byte was handed to the server: with
    `entered_at`, all the time the exchange spent inside the double."""

    def answered(self) -> None:
        self.answered_at = time.time()


class RequestLog:
    """The last requests received (at most 1000), oldest first."""

    def __init__(self) -> None:
        self._entries: deque[RecordedRequest] = deque(maxlen=MAX_RECORDED)

    def record(
        self,
        path: str,
        body: Any,
        conversation_key: str | None = None,
        *,
        entered_at: float | None = None,
    ) -> RecordedRequest:
        entry = RecordedRequest(path, body, conversation_key, time.time(), entered_at=entered_at)
        self._entries.append(entry)
        return entry

    def entries(self) -> list[dict[str, Any]]:
        return [asdict(entry) for entry in self._entries]

    def clear(self) -> None:
        self._entries.clear()
