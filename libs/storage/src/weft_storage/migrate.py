"""Apply the schema migrations: ``python -m weft_storage.migrate upgrade [REVISION]``.

Idempotent, and safe to run from several processes at once (replicas' init containers,
hook Jobs of two releases): every run holds ``MIGRATION_LOCK``, a PostgreSQL advisory
lock, for its whole transaction, so they run one after the other and each later one
finds the heads the earlier one committed and applies nothing twice. Each applied
revision is printed (``applied <revision>``). Upgrades every head (features may add
independent migration branches that depend only on ``0001``). Run before services start
(``make up`` does it, the Helm chart runs it as a hook Job). The database URL comes from
``WEFT_DATABASE_URL``: the migration owner role, which owns every table and which no
service uses at run time.

Each upgrade also creates missing service roles (when the owner role may) and re-applies
every service role's grants from ``weft_storage.ownership``. Given a service's own URL in
``WEFT_<SERVICE>_DATABASE_URL`` (e.g. ``WEFT_AGENT_CONFIG_DATABASE_URL``), it sets that
role's password to the URL's, so that the URLs the services get and the roles stay in step
(docs/operations.md, "Database roles").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext, MigrationInfo
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from weft_storage.ownership import SERVICE_ROLES
from weft_storage.roles import set_passwords

DEFAULT_URL = "postgresql+asyncpg://weft:weft@127.0.0.1:15432/weft"

MIGRATION_LOCK = 0x77656674  # "weft"
"""The advisory lock every upgrade (``migrations/env.py``) and the role passwords' update
hold for their transaction: processes that migrate at once run one after the other, and
each later one reads the heads the earlier one committed, instead of racing to create
the same tables (or updating the same role concurrently)."""


def report_step(
    ctx: MigrationContext, step: MigrationInfo, heads: Collection[Any], run_args: Mapping[str, Any]
) -> None:
    """Alembic's ``on_version_apply``: one line per revision this run applied (the test of
    concurrent runs counts them: none twice)."""
    verb = "applied" if step.is_upgrade else "reverted"
    print(f"weft_storage.migrate: {verb} {step.up_revision_id}", file=sys.stderr, flush=True)


def alembic_config(database_url: str) -> Config:
    """An Alembic config pointing at the migrations shipped in this package."""
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    cfg.set_main_option("sqlalchemy.url", database_url)
    return cfg


def service_urls(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """Service -> its own database URL, from ``WEFT_<SERVICE>_DATABASE_URL`` (set ones)."""
    urls = {}
    for service in SERVICE_ROLES:
        url = environ.get(f"WEFT_{service.upper()}_DATABASE_URL")
        if url:
            urls[service] = url
    return urls


async def _set_passwords(database_url: str, urls: dict[str, str]) -> list[str]:
    engine = create_async_engine(database_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            return await conn.run_sync(set_passwords, urls)
    finally:
        await engine.dispose()


def main() -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["upgrade", "downgrade", "current"])
    parser.add_argument("revision", nargs="?", default="heads")
    args = parser.parse_args()
    database_url = os.environ.get("WEFT_DATABASE_URL", DEFAULT_URL)
    cfg = alembic_config(database_url)
    if args.command == "upgrade":
        command.upgrade(cfg, args.revision)
        urls = service_urls(os.environ)
        if urls:
            skipped = asyncio.run(_set_passwords(database_url, urls))
            if skipped:
                print(
                    f"passwords of {', '.join(skipped)} not set: the migration role has no "
                    "CREATEROLE (a DBA keeps them equal to the services' URLs)",
                    file=sys.stderr,
                )
    elif args.command == "downgrade":
        command.downgrade(cfg, args.revision)
    else:
        command.current(cfg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
