"""A turn streamed in the background while a test answers its prompts (approvals, MCP
authorisations): the end-to-end suites of SPEC H-01..H-06 share it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from httpx_sse import aconnect_sse

PROMPT = "tool_approval_required"


class PromptedTurn:
    """One turn of ``session_id`` streamed from ``api``; each prompt it shows waits in
    :meth:`prompt` for the test to read it, in order."""

    def __init__(self, api: httpx.AsyncClient, session_id: str, query: str):
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._prompts: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.task = asyncio.create_task(self._read(api, session_id, query))

    async def _read(self, api: httpx.AsyncClient, session_id: str, query: str) -> None:
        url = f"/api/v1/agent-chat/{session_id}"
        async with aconnect_sse(api, "POST", url, json={"query": query}, timeout=180) as source:
            async for sse in source.aiter_sse():
                if not sse.event or not sse.data:
                    continue
                event = json.loads(sse.data)
                self.events.append((sse.event, event))
                if sse.event == PROMPT:
                    self._prompts.put_nowait(event["data"])
                if sse.event == "complete":
                    return

    async def prompt(self, timeout_s: float = 90) -> dict[str, Any]:
        """The next prompt's data, once the stream has shown it."""
        return await asyncio.wait_for(self._prompts.get(), timeout_s)

    async def done(self) -> list[tuple[str, dict[str, Any]]]:
        """Every event, once the turn's ``complete`` came."""
        await asyncio.wait_for(self.task, 120)
        return self.events

    def of(self, event: str) -> list[dict[str, Any]]:
        """The data of the turn's events named ``event``, in order."""
        return [d["data"] for e, d in self.events if e == event]
