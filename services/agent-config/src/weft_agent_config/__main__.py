"""``python -m weft_agent_config`` (the service) and ``python -m weft_agent_config
reencrypt-mcp`` (a key rollover's re-encrypt step, docs/mcp.md)."""

import asyncio
import json
import sys

from weft_platform.app import run_service

from weft_agent_config.app import AgentConfigSettings, create_app


def main() -> None:
    """Run the service, or the command named in ``argv``."""
    if sys.argv[1:] == ["reencrypt-mcp"]:
        counts = asyncio.run(reencrypt())
        print(json.dumps(counts))
        if counts.get("unreadable"):
            sys.exit("some MCP secrets open with none of the configured keys: keep their key")
        return
    if sys.argv[1:]:
        sys.exit("usage: python -m weft_agent_config [reencrypt-mcp]")
    app = create_app()
    run_service(app, app.state.runtime)


async def reencrypt() -> dict[str, int]:
    """Rewrite every MCP secret with the first key of WEFT_MCP_SECRET_KEYS."""
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    from weft_agent_config.mcp.reencrypt import reencrypt_all
    from weft_agent_config.mcp.secret_box import SecretBox

    settings = AgentConfigSettings()
    engine = create_async_engine(settings.database_url)
    try:
        box = SecretBox.from_setting(settings.mcp_secret_keys.get_secret_value())
        return await reencrypt_all(async_sessionmaker(engine, expire_on_commit=False), box)
    finally:
        await engine.dispose()


if __name__ == "__main__":
    main()
