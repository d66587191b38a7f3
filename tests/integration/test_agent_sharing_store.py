"""Listing the agents shared with a tenant (SPEC A-10) on the real PostgreSQL: one query
for any number of agents, owners' deleted agents left out, every organisation of an agent
kept, the recipient's disabled switch applied, never the tenant's own shares."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from weft_agent_config.agent_service import AgentService
from weft_agent_config.catalogs import BuiltinAgents, TypePresets
from weft_agent_config.definition import AgentDefinition
from weft_agent_config.sharing import SharingStore
from weft_agent_config.sharing_api import SharingService
from weft_agent_config.store import AgentStore


@contextmanager
def _statements(engine: AsyncEngine) -> Iterator[list[str]]:
    """The SQL statements ``engine`` sends inside the block."""
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(args[2])

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


async def test_shared_agents_are_listed_in_one_query(
    engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession]
) -> None:
    owner, recipient = f"own-{secrets.token_hex(4)}", f"rec-{secrets.token_hex(4)}"
    agents, sharing = AgentStore(sessions), SharingStore(sessions)
    org_a, org_b = await sharing.create_organisation("a"), await sharing.create_organisation("b")
    for org in (org_a, org_b):
        await sharing.set_member(org, owner, "editor")
        await sharing.set_member(org, recipient, "viewer")
    ids = [
        (await agents.create(owner, "u", AgentDefinition(name=f"agent {i}"))).id for i in range(5)
    ]
    for agent_id in ids:
        await sharing.share(owner, agent_id, org_a, "u")
    await sharing.share(owner, ids[0], org_b, "u")
    await agents.delete(owner, ids[4])
    await sharing.set_disabled(recipient, ids[1], True)
    mine = (await agents.create(recipient, "u", AgentDefinition(name="mine"))).id
    await sharing.share(recipient, mine, org_a, "u")

    with _statements(engine) as statements:
        listed = await sharing.shared_agents(recipient)
    assert len(statements) == 1
    assert [ref.agent_id for ref, _ in listed] == ids[:4]
    first, row = listed[0]
    assert first.organisation_ids == (org_a, org_b) and row.name == "agent 0"
    assert [ref.disabled for ref, _ in listed] == [False, True, False, False]
    assert {ref.owner_tenant_id for ref, _ in listed} == {owner}
    assert [ref.agent_id for ref in await sharing.shared_with(recipient)] == ids  # rows only

    service = SharingService(
        AgentService(agents, BuiltinAgents.load(), TypePresets.load(), "m"), sharing
    )
    with _statements(engine) as statements:
        views = await service.list_shared(recipient, include_disabled=False)
    assert len(statements) == 1  # was 1 + one per agent
    assert [v["id"] for v in views] == [ids[0], ids[2], ids[3]]
    assert views[0]["name"] == "agent 0" and views[0]["permission"] == "viewer"
