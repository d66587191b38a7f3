"""McpStore: the MCP tables of agent-config. Every query by a tenant's route carries the
tenant (invariant 5); the internal routes look servers up by id and let ``access`` decide
who may use them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from ulid import ULID
from weft_contracts.mcp import dynamic_tool_name
from weft_storage.agent_config.models_mcp import McpServer, McpServerTool


def new_server_id() -> str:
    """A registration's id (a ULID, lower case, prefixed like agents' ids)."""
    return f"srv_{str(ULID()).lower()}"


class DuplicateName(ValueError):
    """The tenant already has a server of this name (HTTP 409)."""


class TooManyServers(ValueError):
    """The tenant reached ``WEFT_MCP_MAX_SERVERS_PER_TENANT`` (HTTP 409)."""


@dataclass(frozen=True, kw_only=True)
class StoredTool:
    """One listed tool to store (the tenant's flags are kept from the row, if any)."""

    tool_name: str
    description: str
    input_schema: dict[str, Any]
    hints: dict[str, Any]
    problem: str | None


class McpStore:
    """Registrations and their tools."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self.sessions = sessions

    async def count(self, tenant_id: str) -> int:
        """How many servers the tenant has registered."""
        async with self.sessions() as s:
            stmt = select(func.count()).where(McpServer.tenant_id == tenant_id)
            return int((await s.execute(stmt)).scalar_one())

    async def insert(self, row: McpServer, max_servers: int) -> McpServer:
        """Store a new registration; :class:`DuplicateName` when the name is taken,
        :class:`TooManyServers` at the cap (counted under a per-tenant lock, so parallel
        registrations cannot overshoot it)."""
        async with self.sessions.begin() as s:
            await s.execute(
                text("SELECT pg_advisory_xact_lock(hashtext(:key))"),
                {"key": f"weft:mcp_servers:{row.tenant_id}"},
            )
            count = select(func.count()).where(McpServer.tenant_id == row.tenant_id)
            if int((await s.execute(count)).scalar_one()) >= max_servers:
                raise TooManyServers(
                    f"a tenant may register at most {max_servers} MCP servers "
                    "(WEFT_MCP_MAX_SERVERS_PER_TENANT); delete one first"
                )
            if await _name_taken(s, row.tenant_id, row.name, None):
                raise DuplicateName(f"an MCP server named {row.name!r} already exists")
            s.add(row)
        fresh = await self.get(row.tenant_id, row.id)
        assert fresh is not None
        return fresh

    async def get(self, tenant_id: str, server_id: str) -> McpServer | None:
        """The tenant's server, or None (also for another tenant's id)."""
        async with self.sessions() as s:
            return await s.scalar(
                select(McpServer).where(McpServer.tenant_id == tenant_id, McpServer.id == server_id)
            )

    async def by_ids(self, server_ids: Sequence[str]) -> list[McpServer]:
        """Servers by id, whoever owns them (for ``access`` to filter)."""
        if not server_ids:
            return []
        async with self.sessions() as s:
            rows = await s.scalars(select(McpServer).where(McpServer.id.in_(list(server_ids))))
            return list(rows)

    async def list_servers(self, tenant_id: str, *, enabled_only: bool = False) -> list[McpServer]:
        """The tenant's servers, oldest first."""
        stmt = select(McpServer).where(McpServer.tenant_id == tenant_id)
        if enabled_only:
            stmt = stmt.where(McpServer.enabled.is_(True))
        async with self.sessions() as s:
            return list(await s.scalars(stmt.order_by(McpServer.created_at, McpServer.id)))

    async def update(self, tenant_id: str, server_id: str, values: dict[str, Any]) -> bool:
        """Change a registration; False when the tenant has no such server."""
        async with self.sessions.begin() as s:
            name = values.get("name")
            if name is not None and await _name_taken(s, tenant_id, name, server_id):
                raise DuplicateName(f"an MCP server named {name!r} already exists")
            result: Any = await s.execute(
                update(McpServer)
                .where(McpServer.tenant_id == tenant_id, McpServer.id == server_id)
                .values(**values, updated_at=datetime.now(UTC))
            )
        return bool(result.rowcount)

    async def delete(self, tenant_id: str, server_id: str) -> bool:
        """Delete a registration with its tools, OAuth client, states and tokens."""
        async with self.sessions.begin() as s:
            result: Any = await s.execute(
                delete(McpServer).where(McpServer.tenant_id == tenant_id, McpServer.id == server_id)
            )
        return bool(result.rowcount)

    async def tools(self, server_ids: Sequence[str]) -> dict[str, list[McpServerTool]]:
        """The listed tools of these servers, in the server's order."""
        found: dict[str, list[McpServerTool]] = {sid: [] for sid in server_ids}
        if not server_ids:
            return found
        stmt = (
            select(McpServerTool)
            .where(McpServerTool.server_id.in_(list(server_ids)), McpServerTool.listed.is_(True))
            .order_by(McpServerTool.server_id, McpServerTool.position)
        )
        async with self.sessions() as s:
            for row in await s.scalars(stmt):
                found[row.server_id].append(row)
        return found

    async def record_check(
        self, server: McpServer, status: str, error: str | None,
        tools: list[StoredTool] | None = None, dropped: int = 0,
    ) -> None:  # fmt: skip
        """Store a health check; with ``tools``, the list replaces the stored one (flags
        of tools listed again are kept; tools no longer listed are hidden, not deleted,
        so their flags come back with them)."""
        now = datetime.now(UTC)
        values: dict[str, Any] = {"status": status, "last_error": error, "checked_at": now}
        if tools is not None:
            values.update(tools_refreshed_at=now, tools_dropped=dropped)
        async with self.sessions.begin() as s:
            await s.execute(update(McpServer).where(McpServer.id == server.id).values(**values))
            if tools is not None:
                await _replace_tools(s, server, tools)

    async def rename_tools(self, server: McpServer) -> None:
        """Recompute the dynamic names after a rename (they carry the server's name)."""
        async with self.sessions.begin() as s:
            rows = await s.scalars(
                select(McpServerTool).where(McpServerTool.server_id == server.id)
            )
            for row in rows:
                row.name = dynamic_tool_name(server.id, server.name, row.tool_name)

    async def set_tool_flags(
        self, tenant_id: str, server_id: str, tool_name: str, flags: dict[str, bool]
    ) -> McpServerTool | None:
        """Change a tool's flags; None when the tenant has no such server or tool."""
        async with self.sessions.begin() as s:
            row = await s.scalar(
                select(McpServerTool).where(
                    McpServerTool.tenant_id == tenant_id,
                    McpServerTool.server_id == server_id,
                    McpServerTool.tool_name == tool_name,
                    McpServerTool.listed.is_(True),
                )
            )
            if row is None:
                return None
            for key, value in flags.items():
                setattr(row, key, value)
        return row


async def _name_taken(s: AsyncSession, tenant_id: str, name: str, other_than: str | None) -> bool:
    stmt = select(McpServer.id).where(McpServer.tenant_id == tenant_id, McpServer.name == name)
    if other_than is not None:
        stmt = stmt.where(McpServer.id != other_than)
    return (await s.scalar(stmt)) is not None


async def _replace_tools(s: AsyncSession, server: McpServer, tools: list[StoredTool]) -> None:
    await s.execute(
        update(McpServerTool).where(McpServerTool.server_id == server.id).values(listed=False)
    )
    for position, tool in enumerate(tools):
        values = {
            "server_id": server.id,
            "tool_name": tool.tool_name,
            "tenant_id": server.tenant_id,
            "name": dynamic_tool_name(server.id, server.name, tool.tool_name),
            "description": tool.description,
            "input_schema": tool.input_schema,
            "hints": tool.hints,
            "problem": tool.problem,
            "listed": True,
            "position": position,
        }
        stmt = insert(McpServerTool).values(**values)
        kept = {k: v for k, v in values.items() if k not in ("server_id", "tool_name")}
        await s.execute(
            stmt.on_conflict_do_update(index_elements=["server_id", "tool_name"], set_=kept)
        )
