"""MCP (SPEC T-19, H-06): what the services say to each other about a tenant's MCP servers.

agent-config owns the registrations, their secrets and the users' OAuth tokens; the engine
learns the servers an agent may use from the resolved ``AgentConfig`` (``mcp_servers``) and
the tools it may offer from tool results (``PUBLISHED_KEY``); tool-exec runs the calls and
asks agent-config, over internal HTTP with the turn's credential, for the catalog and for a
server's connection (its decrypted headers and the user's token). Secrets never travel in a
Kafka record, an event or a tool result: only in :class:`McpConnection`, over internal HTTP.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from weft_contracts.approvals import RiskClass
from weft_contracts.envelope import Payload
from weft_contracts.text import CleanText

McpTransport = Literal["streamable_http", "sse"]
"""How Weft reaches a server. stdio is not offered: on a shared platform it would run a
tenant's program inside Weft's own processes."""

McpSelectionMode = Literal["all", "selected", "none"]
"""An agent's MCP servers: every server of its tenant, the ones it names, or none. A shared
agent uses only the servers it names (``all`` counts as ``none`` for it)."""

McpServerStatus = Literal["unknown", "ok", "error", "authorization_required"]

TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""What the model's tools API accepts as a function name."""

MAX_TOOL_DESCRIPTION_CHARS = 1024
"""Most characters of a server's tool description the model is shown."""

MAX_SCHEMA_BYTES = 16_384
"""Largest input schema (as compact JSON) a published tool may carry."""

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""Largest message a server may send (a JSON body, or one server-sent event): room for a
result's four 1 MB images in base64 and its text, which the tool's output budget cuts far
shorter anyway. A larger one is cut off while it is read, never held whole in memory."""

DEFAULT_AUTH_WAIT_S = 600.0
"""SPEC H-06: how long a turn waits for a user to authorise a server (an agent's
``mcp_auth_wait_timeout`` at most 0 means this)."""

PUBLISHED_KEY = "mcp_published"
"""Key of ``ToolCallCompletedData.data`` under which tool-exec returns the tools a
``discover_mcp_tools`` call published (a list of :class:`McpToolDef`)."""

AUTHORIZATION_KEY = "mcp_authorization"
"""Key of ``ToolCallCompletedData.data`` under which tool-exec says a call needs the user's
authorisation (an :class:`McpAuthorizationRequired`)."""

_UNSAFE = re.compile(r"[^a-z0-9]+")


def _slug(text: str, limit: int) -> str:
    slug = _UNSAFE.sub("_", text.lower()).strip("_")
    return (slug[:limit].strip("_")) or "x"


def dynamic_tool_name(server_id: str, server_name: str, tool_name: str) -> str:
    """``mcp_<server>_<tool>_<hash>``: stable for a server and a tool, within the model's
    ``^[a-zA-Z0-9_-]{1,64}$``, and never equal to a built-in's name (the ``mcp_`` prefix
    and the hash of the server's id and the tool's exact name)."""
    digest = hashlib.sha256(f"{server_id}\x00{tool_name}".encode()).hexdigest()[:8]
    server = _slug(server_name, 16)
    room = 64 - len("mcp_") - len(server) - 2 - len(digest)
    return f"mcp_{server}_{_slug(tool_name, room)}_{digest}"


def registered_risk(read_only: bool) -> RiskClass:
    """SPEC T-19, H-01: an MCP tool is ``read`` only when the tenant marked it read-only in
    its registration, else ``write``; the server's own hints never lower it."""
    return "read" if read_only else "write"


class McpServerRef(Payload):
    """A server an agent may use this turn (``AgentConfig.mcp_servers``)."""

    id: str = Field(min_length=1, max_length=64)
    name: str = Field(min_length=1, max_length=64)
    description: CleanText = Field(default="", max_length=500)


class McpToolHints(Payload):
    """The server's own annotations: shown to people, never used to lower a risk."""

    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None


class McpToolDef(Payload):
    """One tool of a registered server, as the engine offers it once published."""

    name: str = Field(pattern=TOOL_NAME_PATTERN.pattern, description="The dynamic name.")
    server_id: str = Field(min_length=1, max_length=64)
    server_name: str = Field(min_length=1, max_length=64)
    tool_name: str = Field(min_length=1, max_length=256, description="The server's name.")
    description: CleanText = Field(default="", max_length=MAX_TOOL_DESCRIPTION_CHARS)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    risk: RiskClass = Field(
        default="write", description="``write`` unless the registration marks it read-only."
    )
    always_ask: bool = Field(default=True, description="On unless the tenant turned it off.")
    hints: McpToolHints = Field(default_factory=McpToolHints)
    problem: CleanText | None = Field(
        default=None,
        max_length=500,
        description="Why Weft refuses the tool (bad name, huge/recursive/invalid schema): "
        "listed with this reason, never published nor called.",
    )

    def definition(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": f"[MCP {self.server_name}] {self.description}".strip(),
                "parameters": self.parameters,
            },
        }


class McpAuthorizationRequired(Payload):
    """A call stopped because the user has not authorised the server (SPEC H-06)."""

    server_id: str = Field(min_length=1, max_length=64)
    server_name: str = Field(min_length=1, max_length=64)
    authorization_url: str = Field(min_length=1, max_length=4096)
    expires_at: datetime


# --- internal HTTP between tool-exec and agent-config -------------------------------------


class McpServerCatalog(Payload):
    """A server and its tools as agent-config last listed them (``GET /internal/mcp/catalog``)."""

    id: str
    name: str
    description: CleanText = ""
    status: McpServerStatus = "unknown"
    error: CleanText | None = None
    tools: list[McpToolDef] = Field(default_factory=list)
    refreshed_at: datetime | None = None


class McpCatalog(Payload):
    """The servers of a turn that the credential may use, with their tools."""

    servers: list[McpServerCatalog] = Field(default_factory=list)


class McpConnection(Payload):
    """How tool-exec reaches one server for one user (``GET /internal/mcp/servers/{id}/
    connection``): the only place decrypted secrets leave agent-config."""

    server_id: str
    server_name: str
    url: str
    transport: McpTransport
    # repr=False: a connection in a log line or a traceback must not show its secrets.
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    access_token: str | None = Field(
        default=None,
        repr=False,
        description="The user's OAuth access token for this server, if any.",
    )
    timeout_s: Annotated[float, Field(gt=0, le=600)] = 60.0


class McpAuthorizationStart(Payload):
    """tool-exec asks agent-config to start an authorisation for a server that answered 401
    (``POST /internal/mcp/servers/{id}/authorization``): the turn and call it resumes."""

    www_authenticate: str | None = Field(default=None, max_length=4096)
    call_id: str = Field(min_length=1, max_length=256)
    wait_s: float | None = Field(
        default=None,
        gt=0,
        le=7 * 24 * 3600,
        description="How long the turn waits for the user (the agent's mcp_auth_wait_s): "
        "the link stays usable at least that long; None: agent-config's default.",
    )


class McpAuthorizationCallback(Payload):
    """What the gateway's callback received from the user's browser (``POST
    /internal/mcp/oauth/callback``, the gateway's service credential)."""

    state: str = Field(min_length=1, max_length=512)
    code: str | None = Field(default=None, max_length=4096)
    error: str | None = Field(default=None, max_length=512)


class McpAuthorizationCompleted(Payload):
    """agent-config's answer to a callback: the turn and call the authorisation resumes,
    and how it ended (``denied``: refused at the authorisation server, or the exchange
    failed, ``error`` says why)."""

    tenant_id: str
    user_id: str
    session_id: str
    request_id: str
    call_id: str
    server_id: str
    server_name: str
    outcome: Literal["authorized", "denied"]
    error: str | None = None
