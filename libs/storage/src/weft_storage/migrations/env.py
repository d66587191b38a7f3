"""Alembic environment: runs migrations over the async engine of WEFT_DATABASE_URL."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from weft_storage.base import Base
from weft_storage.migrate import MIGRATION_LOCK, report_step
from weft_storage.roles import apply_grants, ensure_roles

target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection, target_metadata=target_metadata, on_version_apply=report_step
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        context.run_migrations()
        if connection.dialect.name == "postgresql":
            # After every run, under the same lock: the service roles' rights follow the
            # ownership map (tables added by this run included; weft_storage.ownership).
            ensure_roles(connection)
            apply_grants(connection)


async def _run_async() -> None:
    engine = create_async_engine(context.config.get_main_option("sqlalchemy.url") or "")
    async with engine.connect() as conn:
        await conn.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=context.config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_async())
