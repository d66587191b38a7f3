"""Apply the schema migrations: ``python -m weft_storage.migrate upgrade [REVISION]``.

Idempotent; upgrades every head (features may add independent migration branches that
depend only on ``0001``). Run before services start (``make up`` does it, the Helm chart
runs it as a hook Job). The database URL comes from ``WEFT_DATABASE_URL``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from alembic import command
from alembic.config import Config

DEFAULT_URL = "postgresql+asyncpg://weft:weft@127.0.0.1:55432/weft"


def alembic_config(database_url: str) -> Config:
    """An Alembic config pointing at the migrations shipped in this package."""
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    cfg.set_main_option("sqlalchemy.url", database_url)
    return cfg


def main() -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["upgrade", "downgrade", "current"])
    parser.add_argument("revision", nargs="?", default="heads")
    args = parser.parse_args()
    cfg = alembic_config(os.environ.get("WEFT_DATABASE_URL", DEFAULT_URL))
    if args.command == "upgrade":
        command.upgrade(cfg, args.revision)
    elif args.command == "downgrade":
        command.downgrade(cfg, args.revision)
    else:
        command.current(cfg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
