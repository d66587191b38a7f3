"""What the scripted LLM test double received, as seen by tests."""

from __future__ import annotations

from typing import Any

import httpx


async def chat_requests(llm: httpx.AsyncClient) -> list[dict[str, Any]]:
    """Bodies of the chat-completion requests since the last reset, oldest first
    (embedding requests of search and ingestion are left out)."""
    entries = (await llm.get("/_requests")).json()["requests"]
    return [e["body"] for e in entries if str(e["path"]).endswith("/chat/completions")]
