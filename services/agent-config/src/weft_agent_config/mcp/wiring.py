"""Builds the MCP part of agent-config from its settings."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from weft_agent_config.mcp.access import McpAccess
from weft_agent_config.mcp.oauth_flow import OAuthFlow
from weft_agent_config.mcp.oauth_store import OAuthStore
from weft_agent_config.mcp.remote import McpRemote
from weft_agent_config.mcp.secret_box import SecretBox, dev_keys
from weft_agent_config.mcp.service import McpService
from weft_agent_config.mcp.settings import McpSettings
from weft_agent_config.mcp.store import McpStore
from weft_agent_config.sharing import SharingStore


def mcp_service(
    settings: McpSettings,
    sessions: async_sessionmaker[AsyncSession],
    sharing: SharingStore | None,
    remote: McpRemote | None = None,
    *,
    dev_keys_dir: Path | None = None,
) -> McpService:
    """The service with its store, secret box, remote client, access rules and OAuth.
    ``dev_keys_dir``: development, where a key is made when none is configured."""
    keys = settings.mcp_secret_keys.get_secret_value()
    if not keys and dev_keys_dir is not None:
        keys = dev_keys(dev_keys_dir)
    box = SecretBox.from_setting(keys)
    remote = remote or McpRemote(
        settings.mcp_policy(),  # public addresses, plus the operator's allowlist
        timeout_s=settings.mcp_check_timeout_s,
        max_tools=settings.mcp_max_tools_per_server,
    )
    store = McpStore(sessions)
    oauth = OAuthFlow(
        OAuthStore(sessions, box), remote, settings.redirect_uri(), settings.mcp_auth_state_ttl_s
    )
    return McpService(
        store, box, remote, McpAccess(store, sharing), oauth,
        max_servers=settings.mcp_max_servers_per_tenant,
        tools_ttl_s=settings.mcp_tools_ttl_s,
        connection_timeout_s=settings.mcp_connection_timeout_s,
    )  # fmt: skip
