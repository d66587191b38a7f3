"""The MCP settings of agent-config (``WEFT_MCP_*``, ``WEFT_PUBLIC_BASE_URL``)."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict
from weft_mcp_client.transport import McpReachSettings


class McpSettings(McpReachSettings):
    """How agent-config stores and reaches a tenant's MCP servers."""

    model_config = SettingsConfigDict(env_prefix="WEFT_", extra="ignore")

    mcp_secret_keys: SecretStr = Field(
        default=SecretStr(""),
        description="Comma separated Fernet keys: the first encrypts, all decrypt (rollover). "
        "Empty: the MCP routes answer 503 (nothing is ever stored in clear).",
    )
    mcp_max_servers_per_tenant: int = Field(default=20, ge=0, le=1000)
    mcp_max_tools_per_server: int = Field(default=100, ge=1, le=1000)
    mcp_tools_ttl_s: float = Field(
        default=300.0, gt=0, description="Age after which a catalog read lists tools again."
    )
    mcp_check_timeout_s: float = Field(
        default=8.0, gt=0, le=60,
        description="A health check's or a tool listing's whole budget (the gateway's call "
        "to agent-config gives up after 10 s).",
    )  # fmt: skip
    mcp_connection_timeout_s: float = Field(
        default=60.0, gt=0, le=600, description="``McpConnection.timeout_s`` for tool-exec."
    )
    mcp_auth_state_ttl_s: float = Field(
        default=600.0, ge=30, le=7 * 24 * 3600,
        description="How long an authorisation link stays usable.",
    )  # fmt: skip
    public_base_url: str = Field(
        default="http://127.0.0.1:8080",
        description="The gateway's public URL: the OAuth redirect URI is "
        "{WEFT_PUBLIC_BASE_URL}/api/v1/mcp/oauth/callback.",
    )

    def redirect_uri(self) -> str:
        """Where authorisation servers send the user back."""
        return f"{self.public_base_url.rstrip('/')}/api/v1/mcp/oauth/callback"
