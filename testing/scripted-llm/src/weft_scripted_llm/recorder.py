"""The log of requests received, for tests to assert on (`GET /_requests`)."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

MAX_RECORDED = 1000


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    body: Any
    conversation_key: str | None
    received_at: float


class RequestLog:
    """The last requests received (at most 1000), oldest first."""

    def __init__(self) -> None:
        self._entries: deque[RecordedRequest] = deque(maxlen=MAX_RECORDED)

    def record(self, path: str, body: Any, conversation_key: str | None = None) -> None:
        self._entries.append(RecordedRequest(path, body, conversation_key, time.time()))

    def entries(self) -> list[dict[str, Any]]:
        return [asdict(entry) for entry in self._entries]

    def clear(self) -> None:
        self._entries.clear()
