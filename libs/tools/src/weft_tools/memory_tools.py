"""``search_memory`` and ``search_conversations`` (SPEC T-17): the caller's long-term memory
and past conversations, read from the memory service (which owns those tables).

The scope is implicit: tenant and user come from the call, never from the model. The
engine offers ``search_memory`` only to agents with memory enabled (SPEC M-10).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import httpx
from weft_mcp_client.safe_http import tls_context
from weft_tool_catalog.registry import ToolInvocation, ToolOutcome, ToolSpec, dumps
from weft_tool_catalog.specs import (
    SEARCH_CONVERSATIONS,
    SEARCH_MEMORY,
    RecallArguments,
    SearchConversationsArguments,
    SearchMemoryArguments,
)

DEFAULT_MEMORY_URL = "http://127.0.0.1:8085"


class MemoryServiceClient:
    """The memory service's search routes."""

    def __init__(
        self,
        base_url: str | None = None,
        timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        event_hooks: Mapping[str, list[Any]] | None = None,
    ):
        """``event_hooks``: httpx hooks of every request (the process's trace
        propagation: the call's ``traceparent`` reaches memory)."""
        self._base_url = base_url or os.environ.get("WEFT_MEMORY_URL", DEFAULT_MEMORY_URL)
        self._timeout_s = timeout_s
        self._transport = transport
        self._hooks = event_hooks

    async def get(
        self, path: str, params: dict[str, Any], credential: str | None = None
    ) -> dict[str, Any]:
        """GET ``path`` presenting the turn's ``credential``; raises ``httpx.HTTPError``
        on failure (memory answers 401/403 without a credential for this caller)."""
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        async with httpx.AsyncClient(
            base_url=self._base_url,
            timeout=self._timeout_s,
            transport=self._transport,
            verify=tls_context(),
            event_hooks=self._hooks,
        ) as http:
            resp = await http.get(path, params=params, headers=headers)
            resp.raise_for_status()
            data: dict[str, Any] = resp.json()
            return data


class _MemorySearchTool:
    spec: ToolSpec
    _path: str
    _key: str
    _arguments: type[RecallArguments]

    def __init__(self, client: MemoryServiceClient):
        self._client = client

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Search in the caller's scope and list the results."""
        args = call.args(self._arguments)
        query, limit = args.query, args.limit
        params = {
            "tenant_id": call.tenant_id,
            "user_id": call.context.user_id,
            "query": query,
            "limit": limit,
        }
        try:
            data = await self._client.get(self._path, params, call.credential)
        except httpx.HTTPError as exc:
            return ToolOutcome(success=False, error=f"memory service unavailable: {exc}")
        results = data.get(self._key, [])
        return ToolOutcome(
            success=True,
            output=dumps({"query": query, "count": len(results), "results": results}),
            display_type="search_results",
        )


class SearchMemoryTool(_MemorySearchTool):
    """Long-term facts of the caller, best first (limit default 10, max 20)."""

    spec = SEARCH_MEMORY
    _path = "/internal/memories/search"
    _key = "memories"
    _arguments = SearchMemoryArguments


class SearchConversationsTool(_MemorySearchTool):
    """Past messages of the caller, best first (limit default 5, max 8)."""

    spec = SEARCH_CONVERSATIONS
    _path = "/internal/conversations/search"
    _key = "results"
    _arguments = SearchConversationsArguments


def memory_tools(client: MemoryServiceClient | None = None) -> list[_MemorySearchTool]:
    """Both memory tools, sharing one client."""
    shared = client or MemoryServiceClient()
    return [SearchMemoryTool(shared), SearchConversationsTool(shared)]
