"""Running one MCP tool call for a turn (SPEC T-19, H-06): resolve the tool in the turn's
catalog, validate the arguments against its schema, run it on the turn's pooled session,
map the result; a 401 becomes an authorisation request the engine turns into a prompt.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

import anyio
import structlog
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp import ClientSession, McpError
from mcp import types as mcp_types
from mcp.types import CONNECTION_CLOSED
from weft_contracts.mcp import (
    AUTHORIZATION_KEY,
    McpAuthorizationStart,
    McpCatalog,
    McpConnection,
    McpServerCatalog,
    McpToolDef,
)
from weft_contracts.tools import SHOWN_NAME_CHARS
from weft_mcp_client.redaction import connection_secrets, redact_text, redact_value
from weft_mcp_client.session import McpAuthorizationNeeded, McpUnavailable
from weft_tool_catalog.registry import ToolInvocation, ToolOutcome, truncate_output

from weft_tools.mcp_directory import McpDirectory, McpDirectoryError
from weft_tools.mcp_pool import McpSessionPool, TurnKey
from weft_tools.mcp_results import outcome_of

log = structlog.get_logger(__name__)

MAX_KEPT_CATALOGS = 1000
"""Turns whose catalog one worker keeps at once (the oldest go first)."""

_BROKEN = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)


@dataclass(frozen=True)
class Resolved:
    """A tool of the turn's catalog, with its server."""

    server: McpServerCatalog
    tool: McpToolDef


def turn_servers(call: ToolInvocation) -> list[str]:
    """The MCP servers the turn's agent may use (none: MCP tools refuse)."""
    return list(call.context.mcp_server_ids or [])


class McpCaller:
    """Catalog look-ups and calls for a turn; shared by ``discover_mcp_tools``,
    ``call_mcp_tool`` and the dynamic ``mcp_*`` names."""

    def __init__(
        self,
        directory: McpDirectory,
        pool: McpSessionPool,
        *,
        request_timeout_s: float = 60.0,
        catalog_ttl_s: float = 10.0,
    ):
        self.directory = directory
        self.pool = pool
        self.request_timeout_s = request_timeout_s
        """Each request inside a session; the worker's deadline bounds the whole call."""
        self._catalog_ttl_s = catalog_ttl_s
        self._catalogs: OrderedDict[tuple[str, tuple[str, ...]], tuple[float, McpCatalog]] = (
            OrderedDict()
        )
        """A turn's catalog on this worker, for ``catalog_ttl_s`` (0: never kept): a
        turn's later calls skip the round trip to agent-config."""
        self._secrets: OrderedDict[tuple[str, str], frozenset[str]] = OrderedDict()
        """(request_id, server_id): the secrets of every connection the turn opened to the
        server on this worker, scrubbed from what the server answers (a session is reused
        across calls, so they are kept until the turn ends, not only while opening)."""

    async def catalog(self, call: ToolInvocation, *, refresh: bool = False) -> McpCatalog:
        """The turn's servers as agent-config lists them, never one outside the turn's;
        kept for the turn a few seconds (``refresh`` reads it again)."""
        wanted = turn_servers(call)
        key = (call.request_id, tuple(wanted))
        kept = self._catalogs.get(key)
        if kept is not None and not refresh and time.monotonic() - kept[0] < self._catalog_ttl_s:
            return kept[1]
        found = await self.directory.catalog(wanted, refresh=refresh, credential=call.credential)
        allowed = set(wanted)
        catalog = McpCatalog(servers=[s for s in found.servers if s.id in allowed])
        if self._catalog_ttl_s > 0:
            self._catalogs[key] = (time.monotonic(), catalog)
            self._catalogs.move_to_end(key)
            while len(self._catalogs) > MAX_KEPT_CATALOGS:
                self._catalogs.popitem(last=False)
        return catalog

    def forget_turn(self, request_id: str) -> None:
        """Drop a turn's kept catalog (turn end, or a new authorisation)."""
        for key in [k for k in self._catalogs if k[0] == request_id]:
            del self._catalogs[key]

    def end_turn(self, request_id: str) -> None:
        """Drop everything kept for a finished turn: its catalog and its secrets."""
        self.forget_turn(request_id)
        for key in [k for k in self._secrets if k[0] == request_id]:
            del self._secrets[key]

    def _remember_secrets(self, request_id: str, conn: McpConnection) -> None:
        key = (request_id, conn.server_id)
        self._secrets[key] = self._secrets.get(key, frozenset()) | connection_secrets(conn)
        self._secrets.move_to_end(key)
        while len(self._secrets) > MAX_KEPT_CATALOGS:
            self._secrets.popitem(last=False)

    def _scrubbed(self, request_id: str, server_id: str, outcome: ToolOutcome) -> ToolOutcome:
        """``outcome`` without the connection's secrets (the server may echo them: a
        ``whoami`` tool, an "invalid key sk-..." error), which must never reach a tool
        result, hence Kafka, the turn's events or the model."""
        secrets = self._secrets.get((request_id, server_id))
        if not secrets:
            return outcome
        return replace(
            outcome,
            output=redact_text(outcome.output, secrets),
            error=redact_text(outcome.error, secrets) if outcome.error else outcome.error,
            data=redact_value(outcome.data, secrets),
        )

    @staticmethod
    def resolve(catalog: McpCatalog, ref: str) -> Resolved | str:
        """The tool ``ref`` names (a dynamic name or ``<server_id>/<tool_name>``), or why
        it cannot be called."""
        server_id, _, tool_name = ref.partition("/")
        for server in catalog.servers:
            for tool in server.tools:
                by_ref = tool_name and server.id == server_id and tool.tool_name == tool_name
                if tool.name == ref or by_ref:
                    if tool.problem:
                        return f"MCP tool {ref[:SHOWN_NAME_CHARS]!r} is refused: {tool.problem}"
                    return Resolved(server, tool)
        return (
            f"no MCP tool {ref[:SHOWN_NAME_CHARS]!r} among this agent's servers; "
            "use discover_mcp_tools to list them"
        )

    async def call(
        self, call: ToolInvocation, resolved: Resolved, arguments: dict[str, Any]
    ) -> ToolOutcome:
        """Run ``resolved`` with ``arguments`` on the turn's session with its server; the
        connection's secrets are scrubbed from whatever comes back."""
        problem = argument_problem(resolved.tool, arguments)
        if problem:
            return ToolOutcome(success=False, error=problem)
        try:
            outcome = await self._call(call, resolved, arguments)
        except Exception as exc:
            # A failure the mapping above does not know (the SDK refusing a malformed
            # answer...): its text may quote what the server sent, so it is scrubbed like
            # a result, and logged without it (the worker would log and answer it raw).
            log.warning("mcp_call_failed", server_id=resolved.server.id,
                        error_type=type(exc).__name__)  # fmt: skip
            outcome = ToolOutcome(
                success=False,
                error=f"MCP server {resolved.server.name} failed: "
                f"{type(exc).__name__}: {str(exc)[:500]}",
            )
        return self._scrubbed(call.request_id, resolved.server.id, outcome)

    async def _call(
        self, call: ToolInvocation, resolved: Resolved, arguments: dict[str, Any]
    ) -> ToolOutcome:
        try:
            outcome = await self._run(call, resolved, arguments)
        except McpAuthorizationNeeded as needed:
            return await self.authorize(call, resolved.server, needed.www_authenticate)
        except (McpUnavailable, McpDirectoryError) as exc:
            return ToolOutcome(
                success=False, error=f"MCP server {resolved.server.name} unavailable: {exc}"
            )
        if outcome.error:
            limit = call.context.max_output_chars
            outcome = ToolOutcome(
                success=outcome.success, output=outcome.output,
                error=truncate_output(outcome.error, limit), data=outcome.data,
            )  # fmt: skip
        return outcome

    async def _run(
        self, call: ToolInvocation, resolved: Resolved, arguments: dict[str, Any]
    ) -> ToolOutcome:
        turn = TurnKey(call.session_id, call.request_id)
        server = resolved.server

        async def connection() -> McpConnection:
            conn = await self.directory.connection(server.id, credential=call.credential)
            self._remember_secrets(call.request_id, conn)
            return conn

        async def use(session: ClientSession) -> mcp_types.CallToolResult:
            return await session.call_tool(resolved.tool.tool_name, arguments)

        for attempt in (1, 2):  # a broken session is dropped and opened again once
            broken = False
            try:
                result = await self.pool.run(
                    turn, server.id, connection, use, timeout_s=self.request_timeout_s
                )
                return outcome_of(result)
            except McpError as exc:
                if exc.error.code != CONNECTION_CLOSED:
                    return ToolOutcome(success=False, error=_mcp_error_text(server.name, exc))
                broken = True
            except _BROKEN:
                broken = True
            if broken:
                cause = await self.pool.drop(turn, server.id)
                if isinstance(cause, McpAuthorizationNeeded):
                    raise cause from None
                # The request may have reached the server: only a read is sent again.
                if attempt == 2 or resolved.tool.risk != "read":
                    return ToolOutcome(
                        success=False,
                        error=(
                            f"MCP server {server.name} went away during the call; its "
                            "outcome is unknown: check before retrying"
                        ),
                    )
        raise AssertionError("unreachable")

    async def authorize(
        self, call: ToolInvocation, server: McpServerCatalog, www_authenticate: str | None = None
    ) -> ToolOutcome:
        """SPEC H-06: ask agent-config to start the user's authorisation of ``server`` (it
        answered 401, or agent-config could not list its tools without the user's token)
        and answer "authorisation required" with what the engine prompts the user with."""
        # Once the user has authorised, the retried call must see the server's tools as
        # that user's token lists them: the turn's kept catalog is from before.
        self.forget_turn(call.request_id)
        start = McpAuthorizationStart(
            www_authenticate=(www_authenticate or "")[:4096] or None,
            call_id=call.call_id or call.request_id,
            wait_s=call.context.mcp_auth_wait_s,
        )
        name = server.name
        try:
            required = await self.directory.start_authorization(
                server.id, start, credential=call.credential
            )
        except McpDirectoryError as exc:
            return ToolOutcome(
                success=False, error=f"MCP server {name} needs authorisation, which failed: {exc}"
            )
        return ToolOutcome(
            success=False,
            error=(
                f"{name} needs your authorisation: the user is asked to authorise Weft "
                "with this server; the call runs once they do."
            ),
            data={AUTHORIZATION_KEY: required.model_dump(mode="json")},
        )


def _mcp_error_text(server_name: str, exc: McpError) -> str:
    message = exc.error.message[:500]
    if "timed out" in message.lower():
        return f"MCP server {server_name} timed out: {message}"
    return f"MCP server {server_name} refused the call: {message}"


def argument_problem(tool: McpToolDef, arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` do not fit ``tool``'s schema (for the model), or None."""
    try:
        validator = Draft202012Validator(tool.parameters)
        errors = sorted(validator.iter_errors(arguments), key=str)[:5]
    except (SchemaError, RecursionError):
        return f"MCP tool {tool.name} has a schema Weft cannot check; it cannot be called"
    if not errors:
        return None
    detail = "; ".join(
        f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message[:200]}" for e in errors
    )
    return f"invalid arguments for {tool.name}: {detail}"
