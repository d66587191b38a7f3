"""A small SSE client for one turn of the public API (tests, benchmarks, demo)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import aconnect_sse


@dataclass(frozen=True)
class SseEvent:
    """One received event with its arrival time (monotonic seconds)."""

    id: str
    event: str
    data: dict[str, Any]
    received_at: float


async def read_turn(
    client: httpx.AsyncClient,
    url: str,
    *,
    api_key: str,
    json_body: dict[str, Any] | None = None,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    timeout_s: float = 120.0,
) -> list[SseEvent]:
    """Open the SSE stream of a turn and collect its events until ``complete``."""
    events: list[SseEvent] = []
    all_headers = {"Authorization": f"Bearer {api_key}", **(headers or {})}
    async with aconnect_sse(
        client, method, url, json=json_body, headers=all_headers, timeout=timeout_s
    ) as source:
        source.response.raise_for_status()
        async for sse in source.aiter_sse():
            if not sse.event or (sse.event == "message" and not sse.data):
                continue
            events.append(SseEvent(sse.id, sse.event, json.loads(sse.data), time.monotonic()))
            if sse.event == "complete":
                break
    return events
