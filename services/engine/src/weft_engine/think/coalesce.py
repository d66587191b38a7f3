"""DeltaCoalescer: token deltas grouped over a short window so they do not flood Kafka.

The first delta of a stream goes out at once (the user sees the model start); later ones
are merged until the window elapses or the kind of delta changes (thought -> answer).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

Emit = Callable[[str, str], Awaitable[None]]
"""``emit(kind, text)`` with kind ``thought`` or ``answer``."""


class DeltaCoalescer:
    """Buffers deltas of one LLM call; call :meth:`flush` when the stream ends."""

    def __init__(self, emit: Emit, window_s: float, clock: Callable[[], float] = time.monotonic):
        self._emit = emit
        self._window = window_s
        self._clock = clock
        self._kind = ""
        self._buffer: list[str] = []
        self._opened_at = 0.0
        self._first = True

    async def add(self, kind: str, text: str) -> None:
        """Add a delta; emit what is due."""
        if not text:
            return
        if self._first:
            self._first = False
            await self._emit(kind, text)
            return
        if kind != self._kind:
            await self.flush()
            self._kind = kind
            self._opened_at = self._clock()
        self._buffer.append(text)
        if self._clock() - self._opened_at >= self._window:
            await self.flush()

    async def flush(self) -> None:
        """Emit the buffered text, if any."""
        if self._buffer:
            text = "".join(self._buffer)
            self._buffer.clear()
            await self._emit(self._kind, text)
        self._opened_at = self._clock()
