"""A session with a tenant's MCP server through the official SDK, and its tool list
(SPEC T-19).

Both transports (streamable HTTP, legacy SSE) get their HTTP client from the pinned
factory of :mod:`weft_mcp_client.transport`; failures come out as two exceptions the callers
tell apart: :class:`McpAuthorizationNeeded` (the server answered 401: the user must
authorise it, SPEC H-06) and :class:`McpUnavailable` (anything else that kept the
session from working, with a reason a person can read).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio
import httpx
from mcp import ClientSession, McpError
from mcp import types as mcp_types
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from weft_contracts.mcp import (
    MAX_MESSAGE_BYTES,
    MAX_TOOL_DESCRIPTION_CHARS,
    McpConnection,
    McpToolDef,
    McpToolHints,
    dynamic_tool_name,
    registered_risk,
)
from weft_contracts.text import clean_text

from weft_mcp_client.safe_http import BlockedAddress
from weft_mcp_client.schema import name_problem, schema_problem
from weft_mcp_client.transport import McpHttpClientFactory

MAX_LIST_PAGES = 20
"""Pages of ``tools/list`` read at most: a server paging forever is cut off."""


class McpAuthorizationNeeded(Exception):
    """The server answered 401: the user has to authorise Weft (SPEC H-06)."""

    def __init__(self, www_authenticate: str | None):
        super().__init__("the server requires authorization")
        self.www_authenticate = www_authenticate
        """The server's ``WWW-Authenticate`` header (OAuth discovery starts from it)."""


class McpUnavailable(Exception):
    """The server could not be reached or did not speak MCP; ``str()`` says why."""


@dataclass(frozen=True)
class ListedTool:
    """One tool as the server listed it, with why Weft refuses it (if it does)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    hints: McpToolHints
    problem: str | None
    """Why the tool is refused (bad name, huge/recursive/invalid schema); None: usable."""


@dataclass(frozen=True)
class ListedTools:
    """A server's tools, at most ``max_tools`` of them."""

    tools: list[ListedTool]
    dropped: int
    """Tools seen beyond ``max_tools`` (a lower bound: listing stops once over)."""


class MessageTooLarge(httpx.ReadError):
    """The server sent a message past :data:`MAX_MESSAGE_BYTES`; the read stopped there."""


_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
"""A server-sent event's end (a blank line, with any of the three line endings)."""


class _WatchedStream(httpx.AsyncByteStream):
    """A response body that reports a transport failure while it is read, and cuts off
    a message longer than ``max_message_bytes``: counted from the last event boundary, so
    a long-lived event stream (legacy SSE carries every answer on one response) is held
    to the cap per message, and a plain JSON body as a whole."""

    def __init__(
        self,
        inner: httpx.AsyncByteStream,
        on_broken: Callable[[httpx.TransportError], None],
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ):
        self._inner = inner
        self._on_broken = on_broken
        self._max = max_message_bytes

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending, tail = 0, b""
        try:
            async for chunk in self._inner:
                seen = tail + chunk  # a boundary may straddle two chunks
                start = len(tail)  # where this chunk's bytes begin in ``seen``
                for end in _EVENT_END.finditer(seen):
                    if end.end() <= start:
                        continue  # it ended a message counted before
                    self._check(pending + end.end() - start)
                    pending, start = 0, end.end()
                pending += len(seen) - start
                self._check(pending)
                tail = seen[-3:]
                yield chunk
        except httpx.TransportError as exc:
            self._on_broken(exc)
            raise

    def _check(self, size: int) -> None:
        if size > self._max:
            raise MessageTooLarge(f"the server sent a message larger than {self._max} bytes")

    async def aclose(self) -> None:
        await self._inner.aclose()


class _AuthWatch:
    """Watches the session's HTTP client: notes a 401 answer (the SDK turns it into an
    exception deep in a task group, without the ``WWW-Authenticate`` header) and a body
    cut off mid-read (the SDK logs it and lets the call wait for its timeout)."""

    def __init__(
        self, factory: McpHttpClientFactory, on_broken: Callable[[httpx.TransportError], None]
    ):
        self._factory = factory
        self._on_broken = on_broken
        self.challenge: str | None = None
        self.unauthorized = False

    def __call__(
        self,
        headers: dict[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
        auth: httpx.Auth | None = None,
    ) -> httpx.AsyncClient:
        client = self._factory(headers=headers, timeout=timeout, auth=auth)
        client.event_hooks["response"].append(self._on_response)
        return client

    async def _on_response(self, response: httpx.Response) -> None:
        if response.status_code == 401:
            self.unauthorized = True
            self.challenge = response.headers.get("www-authenticate")
        if isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = _WatchedStream(response.stream, self._on_broken)


def _headers(conn: McpConnection) -> dict[str, str]:
    headers = dict(conn.headers)
    if conn.access_token:
        headers["Authorization"] = f"Bearer {conn.access_token}"
    return headers


@asynccontextmanager
async def _streams(
    conn: McpConnection, factory: McpHttpClientFactory, timeout_s: float
) -> AsyncIterator[tuple[Any, Any]]:
    if conn.transport == "sse":
        async with sse_client(
            conn.url,
            headers=_headers(conn),
            timeout=timeout_s,
            sse_read_timeout=max(timeout_s, 60.0),
            httpx_client_factory=factory,
        ) as (read, write):
            yield read, write
        return
    timeout = httpx.Timeout(timeout_s, read=max(timeout_s, 60.0))
    async with (
        factory(headers=_headers(conn), timeout=timeout) as client,
        streamable_http_client(conn.url, http_client=client) as (read, write, _),
    ):
        yield read, write


_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    httpx.HTTPError,
    McpError,
    OSError,
    BlockedAddress,
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _reason(exc: BaseException) -> str:
    for leaf in _leaves(exc):
        if isinstance(leaf, MessageTooLarge):
            return str(leaf)
        if isinstance(leaf, httpx.HTTPStatusError):
            return f"the server answered HTTP {leaf.response.status_code}"
        if isinstance(leaf, BlockedAddress):
            return f"refused: {leaf}"
        if isinstance(leaf, httpx.ConnectError | OSError):
            return f"could not connect: {leaf or type(leaf).__name__}"
        if isinstance(leaf, McpError):
            return f"protocol error: {leaf.error.message[:300]}"
        if isinstance(leaf, anyio.ClosedResourceError | anyio.BrokenResourceError):
            return "the connection closed"
    leaf = _leaves(exc)[0]
    return f"{type(leaf).__name__}: {str(leaf)[:300]}"


def _is_transport_failure(exc: BaseException) -> bool:
    leaves = _leaves(exc)
    return bool(leaves) and all(isinstance(leaf, _TRANSPORT_ERRORS) for leaf in leaves)


async def _fail_on_transport_error(message: object) -> None:
    """The SDK hands a transport failure (a server gone mid-response) to the session as
    a message and lets the call wait for its timeout; raising here ends the session's
    receive loop, which answers every pending request with "Connection closed" at once."""
    if isinstance(message, Exception):
        raise McpUnavailable(_reason(message))


@asynccontextmanager
async def mcp_session(
    conn: McpConnection,
    *,
    factory: McpHttpClientFactory,
    timeout_s: float,
    on_broken: Callable[[httpx.TransportError], None] | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialised SDK session with ``conn``'s server over its transport, every
    request through ``factory`` (the pinned one) with ``timeout_s`` per request.

    Raises :class:`McpAuthorizationNeeded` when the server answers 401, and
    :class:`McpUnavailable` when connecting, initialising or the transport fails (also
    while the caller uses the session). A session request the server does not answer
    in ``timeout_s`` raises ``McpError`` inside the body, which the caller maps.
    ``on_broken`` is called with the cause when a response is cut off (the server went
    away, or sent a message past :data:`MAX_MESSAGE_BYTES`: :class:`MessageTooLarge`): the
    holder of a long-lived session closes it, which fails the pending requests at once.
    """
    watch = _AuthWatch(factory, on_broken or (lambda _: None))
    try:
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(_streams(conn, watch, timeout_s))
            session = await stack.enter_async_context(
                ClientSession(
                    read,
                    write,
                    read_timeout_seconds=timedelta(seconds=timeout_s),
                    message_handler=_fail_on_transport_error,
                )
            )
            await session.initialize()
            yield session
    except (McpAuthorizationNeeded, McpUnavailable):
        raise
    except (Exception, BaseExceptionGroup) as exc:
        if watch.unauthorized:
            raise McpAuthorizationNeeded(watch.challenge) from exc
        if _is_transport_failure(exc):
            raise McpUnavailable(_reason(exc)) from exc
        raise


def _hints(annotations: mcp_types.ToolAnnotations | None) -> McpToolHints:
    if annotations is None:
        return McpToolHints()
    return McpToolHints(
        read_only_hint=annotations.readOnlyHint,
        destructive_hint=annotations.destructiveHint,
        idempotent_hint=annotations.idempotentHint,
        open_world_hint=annotations.openWorldHint,
    )


def listed_tool(tool: mcp_types.Tool) -> ListedTool:
    """``tool`` as Weft keeps it: description cleaned and bounded, problem named."""
    problem = name_problem(tool.name) or schema_problem(tool.inputSchema)
    description = clean_text(tool.description or "")[:MAX_TOOL_DESCRIPTION_CHARS]
    return ListedTool(
        name=tool.name[:256],
        description=description,
        # A refused schema is not kept: it may be megabytes, or what made it refused.
        input_schema={"type": "object"} if problem else tool.inputSchema,
        hints=_hints(tool.annotations),
        problem=problem,
    )


async def list_server_tools(
    conn: McpConnection, *, factory: McpHttpClientFactory, timeout_s: float, max_tools: int
) -> ListedTools:
    """The server's tools (``tools/list``, every page up to ``max_tools``), each checked.

    Raises :class:`McpAuthorizationNeeded` or :class:`McpUnavailable` like
    :func:`mcp_session`; a listing that overruns ``timeout_s`` raises McpUnavailable.
    """
    tools: list[ListedTool] = []
    seen = 0
    try:
        with anyio.fail_after(timeout_s):
            async with mcp_session(conn, factory=factory, timeout_s=timeout_s) as session:
                cursor: str | None = None
                for _ in range(MAX_LIST_PAGES):
                    page = await session.list_tools(
                        params=mcp_types.PaginatedRequestParams(cursor=cursor)
                    )
                    for tool in page.tools:
                        seen += 1
                        if len(tools) < max_tools:
                            tools.append(listed_tool(tool))
                    cursor = page.nextCursor
                    if cursor is None or seen >= max_tools:
                        break
    except McpError as exc:
        raise McpUnavailable(_reason(exc)) from exc
    except TimeoutError:
        raise McpUnavailable(f"the server did not list its tools within {timeout_s:g}s") from None
    return ListedTools(tools=tools, dropped=max(0, seen - max_tools))


def tool_def(
    server_id: str, server_name: str, tool: ListedTool, *, read_only: bool, always_ask: bool
) -> McpToolDef:
    """What the engine offers for ``tool`` (published) and the catalog lists.

    ``risk`` is ``read`` only when the tenant marked the tool read-only: the server's own
    ``readOnlyHint`` is shown in ``hints`` but never lowers the risk (SPEC T-19)."""
    return McpToolDef(
        name=dynamic_tool_name(server_id, server_name, tool.name),
        server_id=server_id,
        server_name=server_name,
        tool_name=tool.name,
        description=tool.description,
        parameters=tool.input_schema,
        risk=registered_risk(read_only),
        always_ask=always_ask,
        hints=tool.hints,
        problem=tool.problem,
    )
