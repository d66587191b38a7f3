"""What agent-config asks of MCP servers and their authorisation servers, always through
the SSRF-safe pinned client of ``weft_mcp_client.transport`` (every request's host resolved,
checked against the policy and connected to by its checked address)."""

from __future__ import annotations

from dataclasses import dataclass

from weft_contracts.mcp import McpConnection, McpServerStatus
from weft_mcp_client.redaction import connection_secrets, redact_text, redact_value
from weft_mcp_client.safe_http import AddressPolicy, BlockedAddress, Resolver, system_resolver
from weft_mcp_client.session import (
    ListedTool,
    McpAuthorizationNeeded,
    McpUnavailable,
    list_server_tools,
)
from weft_mcp_client.transport import check_server_url, pinned_client_factory

from weft_agent_config.mcp.store import StoredTool

MAX_ERROR_CHARS = 500


@dataclass(frozen=True, kw_only=True)
class Listing:
    """The outcome of a health check: a status, and the tools when they were listed."""

    status: McpServerStatus
    error: str | None = None
    tools: list[StoredTool] | None = None
    dropped: int = 0
    www_authenticate: str | None = None


class UrlRefused(ValueError):
    """A server URL the policy refuses (HTTP 422 with the reason)."""


class McpRemote:
    """The policy, the pinned client factory and the budgets of remote calls."""

    def __init__(
        self, policy: AddressPolicy, *, timeout_s: float, max_tools: int,
        resolver: Resolver = system_resolver,
    ):  # fmt: skip
        self.policy = policy
        self.resolver = resolver
        self.factory = pinned_client_factory(policy, resolver)
        self._timeout_s = timeout_s
        self._max_tools = max_tools

    async def check_url(self, url: str) -> None:
        """:class:`UrlRefused` unless the URL may be registered."""
        try:
            await check_server_url(url, self.policy, self.resolver)
        except (BlockedAddress, ValueError) as exc:
            raise UrlRefused(f"server URL refused: {exc}") from None

    async def list_tools(self, conn: McpConnection) -> Listing:
        """List the server's tools (the health check): ok with the tools, or the status
        and the reason people read. The connection's secrets are scrubbed from both: a
        server may repeat them, and tool lists and errors are shown to the tenant's users
        and the model."""
        secrets = connection_secrets(conn)
        try:
            listed = await list_server_tools(
                conn, factory=self.factory, timeout_s=self._timeout_s, max_tools=self._max_tools
            )
        except McpAuthorizationNeeded as exc:
            return Listing(
                status="authorization_required",
                error="the server needs a user's authorisation (OAuth)",
                www_authenticate=exc.www_authenticate,
            )
        except McpUnavailable as exc:
            error = redact_text(str(exc), secrets)[:MAX_ERROR_CHARS]
            return Listing(status="error", error=error or "unavailable")
        tools = [_stored(t, secrets) for t in listed.tools]
        return Listing(status="ok", tools=tools, dropped=listed.dropped)


def _stored(tool: ListedTool, secrets: frozenset[str]) -> StoredTool:
    return StoredTool(
        tool_name=tool.name,
        description=redact_text(tool.description, secrets),
        input_schema=redact_value(tool.input_schema, secrets),
        hints=tool.hints.model_dump(mode="json", exclude_none=True),
        problem=tool.problem,
    )
