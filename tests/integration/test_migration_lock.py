"""Migrations run by several processes at once on an empty database (replicas' init jobs,
parallel test workers) take turns on an advisory lock instead of racing to create the same
tables (weft_storage/migrations/env.py, ``MIGRATION_LOCK``)."""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import asyncpg
import pytest
from alembic.script import ScriptDirectory
from weft_storage.migrate import alembic_config

from tests.db_fixtures import fresh_database, migrate_upgrade

pytestmark = pytest.mark.infra


async def _versions(url: str) -> set[str]:
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        return {row[0] for row in await conn.fetch("SELECT version_num FROM alembic_version")}
    finally:
        await conn.close()


def test_concurrent_upgrades_of_an_empty_database_all_succeed(infra: dict[str, str]) -> None:
    with fresh_database(infra, "weft_migrate") as url:
        runs = [migrate_upgrade(infra, url) for _ in range(3)]
        outputs = [run.communicate(timeout=180)[0].decode() for run in runs]
        failed = [out[-1500:] for run, out in zip(runs, outputs, strict=True) if run.returncode]
        assert not failed, failed
        script = ScriptDirectory.from_config(alembic_config(url))
        assert asyncio.run(_versions(url)) == set(script.get_heads())
        applied = Counter(
            rev
            for out in outputs
            for rev in re.findall(r"weft_storage\.migrate: applied (\S+)", out)
        )
        assert set(applied) == {rev.revision for rev in script.walk_revisions()}
        assert max(applied.values()) == 1, applied  # nothing applied twice
