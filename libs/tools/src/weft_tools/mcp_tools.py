"""``discover_mcp_tools``, ``call_mcp_tool`` and the dynamic ``mcp_*`` tools (SPEC T-19).

All three ask agent-config for the turn's catalog (``context.mcp_server_ids`` only) and
refuse when the turn names no server. ``describe`` returns the tool's definition under
``data[PUBLISHED_KEY]``: the engine offers it as a function from the next step on.
"""

from __future__ import annotations

import base64
from typing import Any

from weft_contracts.mcp import PUBLISHED_KEY, McpCatalog, McpServerCatalog, McpToolDef
from weft_tool_catalog.registry import ToolInvocation, ToolOutcome, ToolSpec, dumps
from weft_tool_catalog.specs import (
    CALL_MCP_TOOL,
    DISCOVER_MCP_TOOLS,
    MCP_DYNAMIC_PREFIX,
    CallMcpToolArguments,
    DiscoverMcpToolsArguments,
    McpDiscoveryMode,
)

from weft_tools.mcp_calls import McpCaller, Resolved, turn_servers
from weft_tools.mcp_directory import McpDirectoryError

NO_SERVERS = "this agent has no MCP servers"


def _line(tool: McpToolDef) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": tool.tool_name,
        "call_as": tool.name,
        "description": tool.description.split("\n", 1)[0][:200],
        "risk": tool.risk,
        "always_ask": tool.always_ask,
    }
    if tool.problem:
        entry["refused"] = tool.problem
    return entry


def _page(items: list[dict[str, Any]], cursor: str | None, limit: int) -> dict[str, Any]:
    try:
        start = int(base64.urlsafe_b64decode(cursor or "MA==").decode()) if cursor else 0
    except ValueError:
        start = 0
    chunk = items[start : start + limit]
    following = start + limit
    page: dict[str, Any] = {"count": len(items), "tools": chunk}
    if following < len(items):
        page["next_cursor"] = base64.urlsafe_b64encode(str(following).encode()).decode()
    return page


def _score(tool: McpToolDef, words: list[str]) -> int:
    name, text = tool.tool_name.lower(), tool.description.lower()
    return sum(3 * (w in name) + (w in text) for w in words)


class DiscoverMcpToolsTool:
    """Lists the turn's servers and tools, searches and describes them."""

    spec = DISCOVER_MCP_TOOLS

    def __init__(self, caller: McpCaller):
        self._caller = caller

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Answer the asked mode from the turn's catalog."""
        args = call.args(DiscoverMcpToolsArguments)
        if not turn_servers(call):
            return ToolOutcome(success=False, error=f"discover_mcp_tools: {NO_SERVERS}")
        try:
            catalog = await self._caller.catalog(call, refresh=args.refresh)
        except McpDirectoryError as exc:
            return ToolOutcome(success=False, error=f"discover_mcp_tools: {exc}")
        match args.mode:
            case McpDiscoveryMode.LIST_SERVERS:
                return ToolOutcome(success=True, output=dumps({"servers": _servers(catalog)}))
            case McpDiscoveryMode.LIST_TOOLS | McpDiscoveryMode.DESCRIBE if waiting := _needs_user(
                catalog, args.server_id
            ):
                return await self._caller.authorize(call, waiting)
            case McpDiscoveryMode.LIST_TOOLS:
                return self._list_tools(catalog, args)
            case McpDiscoveryMode.SEARCH:
                return self._search(catalog, args)
            case McpDiscoveryMode.DESCRIBE:
                return self._describe(catalog, args)

    @staticmethod
    def _list_tools(catalog: McpCatalog, args: DiscoverMcpToolsArguments) -> ToolOutcome:
        servers = [s for s in catalog.servers if args.server_id in (None, s.id)]
        if args.server_id and not servers:
            return ToolOutcome(success=False, error="no such MCP server for this agent")
        items = [{**_line(t), "server_id": s.id} for s in servers for t in s.tools]
        return ToolOutcome(success=True, output=dumps(_page(items, args.cursor, args.limit)))

    @staticmethod
    def _search(catalog: McpCatalog, args: DiscoverMcpToolsArguments) -> ToolOutcome:
        words = [w for w in (args.query or "").lower().split() if w]
        if not words:
            return ToolOutcome(success=False, error="search needs a query")
        scored = [(_score(t, words), s.id, t) for s in catalog.servers for t in s.tools]
        ranked = sorted((x for x in scored if x[0] > 0), key=lambda x: (-x[0], x[2].name))
        items = [{**_line(t), "server_id": sid} for _, sid, t in ranked]
        return ToolOutcome(success=True, output=dumps(_page(items, args.cursor, args.limit)))

    @staticmethod
    def _describe(catalog: McpCatalog, args: DiscoverMcpToolsArguments) -> ToolOutcome:
        if not args.tool_name:
            return ToolOutcome(success=False, error="describe needs tool_name (and server_id)")
        ref = args.tool_name
        if args.server_id and not ref.startswith(MCP_DYNAMIC_PREFIX):
            ref = f"{args.server_id}/{ref}"
        found = McpCaller.resolve(catalog, ref)
        if isinstance(found, str):
            return ToolOutcome(success=False, error=found)
        tool = found.tool
        described = {**_line(tool), "server_id": found.server.id, "parameters": tool.parameters,
                     "hints": tool.hints.model_dump(exclude_none=True)}  # fmt: skip
        return ToolOutcome(
            success=True,
            output=dumps(described),
            data={PUBLISHED_KEY: [tool.model_dump(mode="json")]},
        )


def _servers(catalog: McpCatalog) -> list[dict[str, Any]]:
    def one(server: McpServerCatalog) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "id": server.id,
            "name": server.name,
            "description": server.description,
            "status": server.status,
            "tools": sum(1 for t in server.tools if not t.problem),
        }
        if server.error:
            entry["error"] = server.error[:300]
        return entry

    return [one(s) for s in catalog.servers]


class CallMcpToolTool:
    """Calls a tool of the turn's servers by its dynamic name or ``server/tool``. Holds
    the session pool, so the registry's turn-end cleanup closes the turn's sessions."""

    spec = CALL_MCP_TOOL

    def __init__(self, caller: McpCaller):
        self._caller = caller

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Resolve, validate, call."""
        args = call.args(CallMcpToolArguments)
        return await _call_ref(self._caller, call, args.tool_ref, dict(args.arguments))

    async def cleanup(self, session_id: str, request_id: str) -> None:
        """Close the turn's MCP sessions on this worker and forget its catalog (T-04)."""
        await self._caller.pool.cleanup(session_id, request_id)
        self._caller.end_turn(request_id)


class DynamicMcpTools:
    """The ``mcp_*`` names (registry fallback): each is the tool of that dynamic name in
    the turn's catalog, called with the model's arguments as they are."""

    prefix = MCP_DYNAMIC_PREFIX

    def __init__(self, caller: McpCaller):
        self._caller = caller

    def spec(self, name: str) -> ToolSpec:
        """A write as far as the worker knows (the redelivery ledger): the catalog's risk
        is the engine's business, and an unknown effect is never replayed."""
        return ToolSpec(name=name, description="MCP tool", read_only=False)

    async def run(self, name: str, call: ToolInvocation) -> ToolOutcome:
        """Resolve ``name`` and call it."""
        return await _call_ref(self._caller, call, name, dict(call.arguments))


async def _call_ref(
    caller: McpCaller, call: ToolInvocation, ref: str, arguments: dict[str, Any]
) -> ToolOutcome:
    if not turn_servers(call):
        return ToolOutcome(success=False, error=f"MCP tool refused: {NO_SERVERS}")
    try:
        catalog = await caller.catalog(call)
    except McpDirectoryError as exc:
        return ToolOutcome(success=False, error=f"MCP tool {ref[:64]!r}: {exc}")
    found: Resolved | str = McpCaller.resolve(catalog, ref)
    if isinstance(found, str):
        waiting = _needs_user(catalog, ref.partition("/")[0] if "/" in ref else None)
        if waiting is not None:  # its tools are listed once the user has authorised it
            return await caller.authorize(call, waiting)
        return ToolOutcome(success=False, error=found)
    return await caller.call(call, found, arguments)


def _needs_user(catalog: McpCatalog, server_id: str | None) -> McpServerCatalog | None:
    """The named server of the turn when agent-config could not list any of its tools
    without the user's authorisation (SPEC H-06). A server whose tools another user's
    token listed is not: its calls answer 401 for this user, which asks then."""
    return next(
        (s for s in catalog.servers
         if s.id == server_id and s.status == "authorization_required" and not s.tools),
        None,
    )  # fmt: skip


def mcp_tools(caller: McpCaller) -> tuple[DiscoverMcpToolsTool, CallMcpToolTool, DynamicMcpTools]:
    """The two registered MCP tools and the dynamic names' handler, sharing ``caller``."""
    return DiscoverMcpToolsTool(caller), CallMcpToolTool(caller), DynamicMcpTools(caller)
