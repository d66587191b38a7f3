"""agent-config's MCP tables on the real PostgreSQL (SPEC T-19): the resolver's selection
modes (own and shared agents), what a tenant may use, flags that survive a refresh, the
key rollover's re-encrypt step (function and CLI), the operator allowlist, tenant purge."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from weft_agent_config.catalogs import BuiltinAgents
from weft_agent_config.definition import AgentDefinition
from weft_agent_config.mcp.access import McpAccess
from weft_agent_config.mcp.oauth_store import OAuthStore, PendingState, StateRefused, state_hash
from weft_agent_config.mcp.reencrypt import reencrypt_all
from weft_agent_config.mcp.remote import Listing, McpRemote, UrlRefused
from weft_agent_config.mcp.secret_box import SecretBox, UnreadableSecret
from weft_agent_config.mcp.settings import McpSettings
from weft_agent_config.mcp.store import McpStore, StoredTool, new_server_id
from weft_agent_config.mcp.wiring import mcp_service
from weft_agent_config.resolver import AgentResolver
from weft_agent_config.sharing import SharingStore
from weft_agent_config.store import AgentStore
from weft_contracts.mcp import McpConnection
from weft_mcp_client.safe_http import AddressPolicy
from weft_storage.agent_config.models_mcp import McpOAuthState, McpServer
from weft_storage.ownership import OWNERS
from weft_storage.tenant_data import Scope, count_rows, delete_rows

from tests.db_fixtures import _migrated, fresh_database

Sessions = async_sessionmaker[AsyncSession]


def tid(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


async def add_server(
    store: McpStore, tenant: str, name: str, *, enabled: bool = True, headers: str | None = None
) -> McpServer:
    row = McpServer(
        id=new_server_id(),
        tenant_id=tenant,
        name=name,
        description="",
        url="https://x.example",
        transport="streamable_http",
        headers_encrypted=headers,
        header_names=[],
        enabled=enabled,
        status="unknown",
        tools_dropped=0,
        created_by="u",
    )
    return await store.insert(row, max_servers=20)


async def test_selection_modes_own_and_shared(sessions: Sessions) -> None:
    owner, recipient = tid("own"), tid("rec")
    mcp, agents, sharing = McpStore(sessions), AgentStore(sessions), SharingStore(sessions)
    s1, s2 = await add_server(mcp, owner, "one"), await add_server(mcp, owner, "two")
    off = await add_server(mcp, owner, "off", enabled=False)
    foreign = await add_server(mcp, recipient, "theirs")
    resolver = AgentResolver(agents, BuiltinAgents.load(), "m", sharing=sharing, mcp=mcp)

    async def servers(tenant: str, **fields: object) -> tuple[list[str], float]:
        agent = await agents.create(
            owner, "u", AgentDefinition.model_validate({"name": "a", "model": "m", **fields})
        )
        org = await sharing.create_organisation("o")
        await sharing.set_member(org, owner, "editor")
        await sharing.set_member(org, recipient, "viewer")
        await sharing.share(owner, agent.id, org, "u")
        config = await resolver.resolve(tenant, agent.id)
        return [s.id for s in config.mcp_servers], config.mcp_auth_wait_s

    assert await servers(owner) == ([], 600.0)  # default mode: none
    assert (await servers(owner, mcp_selection_mode="all"))[0] == [s1.id, s2.id]
    picked = [s2.id, off.id, foreign.id, s1.id]
    selected = {"mcp_selection_mode": "selected", "mcp_services": picked}
    assert await servers(owner, **selected, mcp_auth_wait_timeout=30) == ([s2.id, s1.id], 30.0)
    for unset in (0, -5):  # SPEC H-06: at most 0 means 10 minutes
        assert (await servers(owner, **selected, mcp_auth_wait_timeout=unset))[1] == 600.0
    # A shared agent: its owner's servers it names; "all" counts as none.
    assert (await servers(recipient, **selected))[0] == [s2.id, s1.id]
    assert (await servers(recipient, mcp_selection_mode="all"))[0] == []
    access = McpAccess(mcp, sharing)
    usable = await access.usable(recipient, [s1.id, s2.id, off.id, foreign.id])
    assert [s.id for s in usable] == [s1.id, s2.id, foreign.id]  # asked order, no `off`
    assert await access.one(tid("stranger"), s1.id) is None


async def test_tool_flags_survive_a_refresh_and_a_tool_that_comes_back(sessions: Sessions) -> None:
    mcp = McpStore(sessions)
    server = await add_server(mcp, tid("t"), "flags")

    def tool(name: str) -> StoredTool:
        return StoredTool(
            tool_name=name,
            description=name,
            input_schema={"type": "object"},
            hints={"read_only_hint": True},
            problem=None,
        )

    await mcp.record_check(server, "ok", None, [tool("a"), tool("b")])
    await mcp.set_tool_flags(
        server.tenant_id, server.id, "a", {"read_only": True, "always_ask": False}
    )
    await mcp.record_check(server, "ok", None, [tool("b")])
    assert [t.tool_name for t in (await mcp.tools([server.id]))[server.id]] == ["b"]
    await mcp.record_check(server, "ok", None, [tool("a"), tool("b")], dropped=3)
    a = (await mcp.tools([server.id]))[server.id][0]
    assert (a.tool_name, a.read_only, a.always_ask) == ("a", True, False)
    assert (await mcp.by_ids([server.id]))[0].tools_dropped == 3
    assert await mcp.set_tool_flags(tid("other"), server.id, "a", {"read_only": False}) is None


@pytest.fixture(scope="module")
def rotation_database(infra: dict[str, str]) -> Iterator[str]:
    """A database of the module's own: the re-encrypt step rewrites every MCP secret of its
    database, and the stacks' secrets (under their own keys) must stay out of it."""
    with fresh_database(infra, "weft_mcp_rotation") as own:
        yield _migrated(infra, own)


async def test_reencrypt_moves_every_secret_to_the_new_key(rotation_database: str) -> None:
    engine = create_async_engine(rotation_database)
    try:
        await _rotation(async_sessionmaker(engine, expire_on_commit=False), rotation_database)
    finally:
        await engine.dispose()


async def _rotation(sessions: Sessions, migrated: str) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    mcp = McpStore(sessions)
    sealed = SecretBox.from_setting(old).seal_json({"X-K": "v"})
    server = await add_server(mcp, tid("t"), "rot", headers=sealed)
    lost = await add_server(
        mcp,
        tid("t"),
        "lost",
        headers=SecretBox.from_setting(Fernet.generate_key().decode()).seal(
            "under a key nobody has"
        ),
    )
    counts = await reencrypt_all(sessions, SecretBox.from_setting(f"{new},{old}"))
    assert counts["mcp_servers.headers_encrypted"] == 1 and counts["unreadable"] == 1
    await mcp.delete(lost.tenant_id, lost.id)
    async with sessions() as s:
        stored = await s.scalar(
            select(McpServer.headers_encrypted).where(McpServer.id == server.id)
        )
    assert stored is not None and SecretBox.from_setting(new).open_json(stored) == {"X-K": "v"}
    with pytest.raises(UnreadableSecret):
        SecretBox.from_setting(old).open(stored)
    # The CLI does the same (again: idempotent), with the keys of its environment.
    env = {**os.environ, "WEFT_DATABASE_URL": migrated, "WEFT_MCP_SECRET_KEYS": f"{old},{new}"}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "weft_agent_config", "reencrypt-mcp"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["mcp_servers.headers_encrypted"] == 1
    async with sessions() as s:
        stored = await s.scalar(
            select(McpServer.headers_encrypted).where(McpServer.id == server.id)
        )
    assert stored is not None and SecretBox.from_setting(old).open_json(stored) == {"X-K": "v"}


async def test_loopback_is_refused_without_the_operators_allowlist() -> None:
    url = "http://127.0.0.1:9/mcp"
    plain = McpRemote(AddressPolicy(), timeout_s=1, max_tools=10)
    with pytest.raises(UrlRefused, match="not a public address"):
        await plain.check_url(url)
    allowed = AddressPolicy(allowed_networks=(ipaddress.ip_network("127.0.0.1/32"),))
    await McpRemote(allowed, timeout_s=1, max_tools=10).check_url(url)


async def test_a_tenant_purge_removes_every_mcp_row(sessions: Sessions) -> None:
    tenant = tid("purge")
    mcp = McpStore(sessions)
    server = await add_server(mcp, tenant, "p")
    await mcp.record_check(
        server,
        "ok",
        None,
        [StoredTool(tool_name="t", description="", input_schema={}, hints={}, problem=None)],
    )
    await delete_rows(sessions, Scope(tenant), OWNERS["agent-config"])
    left = await count_rows(sessions, Scope(tenant), OWNERS["agent-config"])
    assert all(left.get(t, 0) == 0 for t in ("mcp_servers", "mcp_server_tools"))
    async with sessions() as s:
        rows = await s.execute(
            text("SELECT count(*) FROM mcp_server_tools WHERE server_id = :s"), {"s": server.id}
        )
        assert rows.scalar_one() == 0


class CountingRemote(McpRemote):
    """A remote whose listing is counted and answers one tool, without any server."""

    def __init__(self) -> None:
        super().__init__(AddressPolicy(), timeout_s=1, max_tools=10)
        self.listings = 0

    async def list_tools(self, conn: McpConnection) -> Listing:
        self.listings += 1
        tool = StoredTool(tool_name=f"t{self.listings}", description="", input_schema={},
                          hints={}, problem=None)  # fmt: skip
        return Listing(status="ok", tools=[tool])


async def test_the_catalog_lists_a_servers_tools_again_only_past_their_ttl(
    sessions: Sessions, monkeypatch: pytest.MonkeyPatch
) -> None:  # SPEC T-19: the cached tool list has a TTL (WEFT_MCP_TOOLS_TTL_S)
    monkeypatch.setenv("WEFT_MCP_SECRET_KEYS", Fernet.generate_key().decode())
    monkeypatch.setenv("WEFT_MCP_TOOLS_TTL_S", "300")
    remote = CountingRemote()
    svc = mcp_service(McpSettings(), sessions, None, remote)
    owner = tid("ttl")
    server = await add_server(svc.store, owner, "cached")

    async def listed(refresh: bool = False) -> list[str]:
        catalog = await svc.catalog(owner, "u", [server.id], refresh=refresh)
        return [t.tool_name for t in catalog.servers[0].tools]

    async def aged(seconds: float) -> None:
        async with sessions.begin() as s:
            row = await s.get(McpServer, server.id)
            assert row is not None and row.tools_refreshed_at is not None
            row.tools_refreshed_at -= timedelta(seconds=seconds)

    assert await listed() == ["t1"], "never listed: listed now"
    await aged(290)
    assert await listed() == ["t1"] and remote.listings == 1, "within the TTL: the stored list"
    await aged(20)
    assert await listed() == ["t2"] and remote.listings == 2, "past the TTL: listed again"
    assert await listed(refresh=True) == ["t3"], "refresh lists at once"


async def test_an_oauth_state_is_refused_once_expired_or_used(sessions: Sessions) -> None:
    # SPEC H-06: single use, and only while the turn waits; only its hash is stored.
    store = OAuthStore(sessions, SecretBox([Fernet.generate_key()]))
    tenant = tid("st")
    server = await add_server(McpStore(sessions), tenant, "oauth")
    pending = PendingState(tenant_id=tenant, user_id="u", session_id="s", request_id="r",
                           call_id="c", server_id=server.id, verifier="v" * 43)  # fmt: skip
    now = datetime.now(UTC)
    expired, live = secrets.token_urlsafe(32), secrets.token_urlsafe(32)  # the shared database
    await store.add_state(expired, pending, now - timedelta(seconds=1))
    with pytest.raises(StateRefused, match="expired"):
        await store.consume_state(expired)
    await store.add_state(live, pending, now + timedelta(minutes=5))
    assert (await store.consume_state(live)) == pending
    with pytest.raises(StateRefused, match="already used"):
        await store.consume_state(live)
    async with sessions() as s:
        stored = list(await s.scalars(select(McpOAuthState.state_hash)))
    assert live not in stored and state_hash(live) in stored
