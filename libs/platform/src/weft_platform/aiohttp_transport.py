"""httpx's client API over aiohttp's connection pool, for the hot internal hops.

httpx's own transport (httpcore on anyio) spends about 0.7 ms of CPU per request on this
2-core machine where aiohttp's spends under 0.3 (``bench/knowledge_search.py`` and the
numbers in docs/tools.md): on tool-exec's ``search_knowledge`` hop to the knowledge
service that difference is most of the hop. This transport keeps every caller on httpx's
API (its requests, responses, errors, hooks and test transports) and swaps only what
moves the bytes.

What it keeps of httpx's contract:

- timeouts: the request's ``timeout`` extension (connect, read, pool) becomes aiohttp's
  socket timeouts; expiring raises :class:`httpx.ConnectTimeout` or
  :class:`httpx.ReadTimeout`;
- errors: a refused or reset connection raises :class:`httpx.ConnectError` or
  :class:`httpx.ReadError` (both :class:`httpx.HTTPError`), never an aiohttp exception;
- bodies: the response streams (``client.stream`` reads it chunk by chunk); content
  encodings are left to httpx, which decodes them (aiohttp's decompression is off);
- redirects: never followed here (httpx follows them when asked);
- one pool per event loop (an aiohttp session is bound to its loop), closed by
  ``aclose``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator

import aiohttp
import httpx

_HOP_BY_HOP = frozenset({"connection", "content-length", "transfer-encoding", "keep-alive"})
"""Request headers aiohttp sets itself from the body it sends."""


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An httpx transport whose connections are aiohttp's."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None, limit: int = 100):
        """``limit``: connections kept per pool; ``ssl_context``: TLS verification (None:
        aiohttp's default, the system's trust store)."""
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _pool(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._limit, ssl=self._ssl),
                auto_decompress=False,
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Accept"),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            self._loop = loop
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in request.headers.raw
            if k.decode("latin-1").lower() not in _HOP_BY_HOP
        ]
        limits = request.extensions.get("timeout") or {}
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=limits.get("pool"),
            sock_connect=limits.get("connect"),
            sock_read=limits.get("read"),
        )
        try:
            resp = await self._pool().request(
                request.method,
                str(request.url),
                headers=headers,
                data=body or None,
                allow_redirects=False,
                timeout=timeout,
            )
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise httpx.ConnectTimeout(str(exc) or "connect timed out", request=request) from exc
        except aiohttp.ClientConnectionError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        except aiohttp.ClientError as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc
        return httpx.Response(
            resp.status,
            headers=[(k, v) for k, v in resp.raw_headers],
            stream=_Body(resp, request),
            request=request,
            extensions={"http_version": f"HTTP/{resp.version.major}.{resp.version.minor}".encode()}
            if resp.version is not None
            else {},
        )

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None


class _Body(httpx.AsyncByteStream):
    """A response's body as aiohttp reads it; closing it gives the connection back."""

    def __init__(self, resp: aiohttp.ClientResponse, request: httpx.Request):
        self._resp = resp
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._resp.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise httpx.ReadTimeout(str(exc) or "read timed out", request=self._request) from exc
        except aiohttp.ClientError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=self._request) from exc

    async def aclose(self) -> None:
        self._resp.release()
