"""The admin stores on the real PostgreSQL: the development key's start-up rule, key
rotation windows, and the catalog-driven count and delete of a tenant's or user's rows."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from weft_gateway.auth import hash_key
from weft_gateway.key_registry import DEV_KEY_NAME, KeyRegistry
from weft_storage.gateway.keys import ApiKey
from weft_storage.ownership import OWNED
from weft_storage.tenant_data import Scope, count_rows, delete_rows


async def _dev_key_state(sessions: async_sessionmaker[AsyncSession], secret: str) -> bool:
    async with sessions() as s:
        row = await s.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(secret)))
    assert row is not None and row.name == DEV_KEY_NAME
    return row.revoked_at is None


async def test_dev_key_is_revoked_when_its_variable_is_unset(own_database: str) -> None:
    # Its own database: an unset variable revokes every development key of the database,
    # and the shared one holds the keys of the test stacks running meanwhile on other
    # workers (it once revoked one, and that stack's tests all got 401).
    engine = create_async_engine(own_database)
    try:
        await _dev_key_rule(async_sessionmaker(engine, expire_on_commit=False))
    finally:
        await engine.dispose()


async def _dev_key_rule(sessions: async_sessionmaker[AsyncSession]) -> None:
    keys = KeyRegistry(sessions)
    tenant, secret = f"t-{secrets.token_hex(4)}", f"dev-{secrets.token_hex(8)}"
    await keys.apply_dev_key(tenant, "dev", secret)
    assert await _dev_key_state(sessions, secret)
    revoked = await keys.apply_dev_key(tenant, "dev", "")
    assert revoked >= 1
    assert not await _dev_key_state(sessions, secret)
    # Set again: the same key works again (a restart with the variable back).
    await keys.apply_dev_key(tenant, "dev", secret)
    assert await _dev_key_state(sessions, secret)
    await keys.apply_dev_key(tenant, "dev", "")


async def test_rotation_overlap_never_extends_an_expiring_key(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    keys = KeyRegistry(sessions)
    tenant = f"t-{secrets.token_hex(4)}"
    soon = datetime.now(UTC).replace(microsecond=0)
    old = await keys.create(tenant, "u", "k", ["kb1"], soon.replace(year=soon.year + 1))
    new = await keys.rotate(tenant, old.id, overlap_s=600)
    assert new.knowledge_base_ids == ["kb1"] and new.expires_at == old.expires_at
    listed = {k.id: k for k in await keys.page(tenant, True, 10, 0)}
    assert listed[old.id].expires_at is not None and listed[old.id].revoked_at is None
    assert listed[old.id].expires_at < old.expires_at  # type: ignore[operator]


async def test_tenant_and_user_rows_are_counted_and_deleted_in_every_table(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    tenant, other = f"t-{secrets.token_hex(4)}", f"t-{secrets.token_hex(4)}"
    async with sessions.begin() as s:
        for t in (tenant, other):
            for user in ("u1", "u2"):
                sid = f"s-{secrets.token_hex(6)}"
                await s.execute(
                    text("INSERT INTO sessions (id, tenant_id, user_id, title, created_at, "
                         "updated_at) VALUES (:s, :t, :u, '', now(), now())"),
                    {"s": sid, "t": t, "u": user},
                )  # fmt: skip
                await s.execute(
                    text("INSERT INTO messages (id, tenant_id, session_id, request_id, role, "
                         'content, agent_steps, "references", is_completed, is_fallback, '
                         "status, duration_ms, created_at, is_partial, images) VALUES "
                         "(:m, :t, :s, :r, 'user', 'hi', '[]', '[]', true, false, 'done', 0, "
                         "now(), false, '[]')"),
                    {"m": secrets.token_hex(8), "t": t, "s": sid, "r": secrets.token_hex(8)},
                )  # fmt: skip
                await s.execute(
                    text("INSERT INTO memories (id, tenant_id, user_id, content) "
                         "VALUES (:i, :t, :u, 'fact')"),
                    {"i": secrets.token_hex(8), "t": t, "u": user},
                )  # fmt: skip
    user_rows = await count_rows(sessions, Scope(tenant, "u1"), OWNED)
    assert (user_rows["sessions"], user_rows["messages"], user_rows["memories"]) == (1, 1, 1)
    await delete_rows(sessions, Scope(tenant, "u1"), OWNED)
    assert not any((await count_rows(sessions, Scope(tenant, "u1"), OWNED)).values())
    rest = await count_rows(sessions, Scope(tenant), OWNED)
    assert (rest["sessions"], rest["messages"], rest["memories"]) == (1, 1, 1)
    deleted = await delete_rows(sessions, Scope(tenant), OWNED)
    assert deleted["messages"] == 1
    assert not any((await count_rows(sessions, Scope(tenant), OWNED)).values())
    untouched = await count_rows(sessions, Scope(other), OWNED)
    assert (untouched["sessions"], untouched["messages"], untouched["memories"]) == (2, 2, 2)
    await delete_rows(sessions, Scope(other), OWNED)
