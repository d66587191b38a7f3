"""Which MCP servers a tenant may use in a turn: its own enabled servers, and the enabled
servers an agent shared with it names explicitly (its owner's, ``selected`` mode only:
a shared agent's ``all`` counts as none, SPEC A-10)."""

from __future__ import annotations

from collections.abc import Sequence

from weft_storage.agent_config.models_mcp import McpServer

from weft_agent_config.mcp.store import McpStore
from weft_agent_config.sharing import SharingStore


def shared_selection(config: dict[str, object]) -> list[str]:
    """The servers a stored agent's config names for sharing (none unless ``selected``)."""
    if config.get("mcp_selection_mode") != "selected":
        return []
    named = config.get("mcp_services")
    return [str(s) for s in named] if isinstance(named, list) else []


class McpAccess:
    """Filters servers by who asks."""

    def __init__(self, store: McpStore, sharing: SharingStore | None):
        self._store = store
        self._sharing = sharing

    async def usable(self, tenant_id: str, server_ids: Sequence[str]) -> list[McpServer]:
        """The servers among ``server_ids`` that ``tenant_id`` may use, in that order;
        the others (another tenant's, disabled, unknown) are simply absent."""
        rows = {r.id: r for r in await self._store.by_ids(list(dict.fromkeys(server_ids)))}
        foreign = {r.id: r.tenant_id for r in rows.values() if r.tenant_id != tenant_id}
        shared = await self._shared_servers(tenant_id) if foreign else set()
        usable = []
        for sid in dict.fromkeys(server_ids):
            row = rows.get(sid)
            if row is None or not row.enabled:
                continue
            if row.tenant_id == tenant_id or (row.tenant_id, sid) in shared:
                usable.append(row)
        return usable

    async def one(self, tenant_id: str, server_id: str) -> McpServer | None:
        """A server ``tenant_id`` may use, or None."""
        found = await self.usable(tenant_id, [server_id])
        return found[0] if found else None

    async def _shared_servers(self, tenant_id: str) -> set[tuple[str, str]]:
        """(owner, server id) pairs named by agents shared with ``tenant_id`` and enabled."""
        if self._sharing is None:
            return set()
        pairs = set()
        for ref, agent in await self._sharing.shared_agents(tenant_id):
            if ref.disabled:
                continue
            for sid in shared_selection(agent.config):
                pairs.add((ref.owner_tenant_id, sid))
        return pairs
