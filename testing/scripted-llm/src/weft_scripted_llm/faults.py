"""Timing faults: delays, paced chunks and stalls that hang until the client gives up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import suppress

from starlette.requests import Request

from weft_scripted_llm.reply import Faults

DISCONNECT_POLL_SECONDS = 0.1


async def sleep_ms(milliseconds: int) -> None:
    if milliseconds > 0:
        await asyncio.sleep(milliseconds / 1000)


async def hang(request: Request, release: asyncio.Event) -> None:
    """Wait until the client disconnects or the stalls are released (`POST /_reset`)."""
    while not release.is_set():
        if await request.is_disconnected():
            return
        with suppress(TimeoutError):
            await asyncio.wait_for(release.wait(), timeout=DISCONNECT_POLL_SECONDS)


def unpaced(faults: Faults) -> bool:
    """Whether the stream has neither chunk delays nor a stall: it can go out as one body."""
    return faults.chunk_delay_ms <= 0 and faults.stall_after_chunks is None


def stall_index(faults: Faults, event_count: int) -> int | None:
    """Index of the event before which the stream hangs (never after the last chunk)."""
    if faults.stall_after_chunks is None:
        return None
    return min(faults.stall_after_chunks, event_count - 1)


async def paced_events(
    events: list[bytes], faults: Faults, request: Request, release: asyncio.Event
) -> AsyncIterator[bytes]:
    """Yield the events `chunk_delay_ms` apart; at the stall index, hang and end the stream."""
    stall_at = stall_index(faults, len(events))
    for index, event in enumerate(events):
        if index == stall_at:
            await hang(request, release)
            return
        if index:
            await sleep_ms(faults.chunk_delay_ms)
        yield event
