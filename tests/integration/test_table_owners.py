"""Every table of the migrated database has one owner in ``weft_storage.ownership``
(a new table without one fails here: give it an owner, and so its service's grants)."""

from __future__ import annotations

import asyncpg
from weft_storage.ownership import OWNED_TABLES, UNOWNED_TABLES, owner_of


async def test_every_table_of_the_migrated_database_has_an_owner(migrated: str) -> None:
    conn = await asyncpg.connect(migrated.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        tables = {
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
    finally:
        await conn.close()
    unowned = sorted(t for t in tables - set(UNOWNED_TABLES) if owner_of(t) is None)
    assert unowned == [], f"tables without an owner in weft_storage.ownership: {unowned}"
    # And the map names no table the migrations do not make (a typo grants nothing).
    mapped = {t for tables_ in OWNED_TABLES.values() for t in tables_}
    assert sorted(mapped - tables) == []
