"""``web_fetch`` (SPEC T-13): fetch up to 8 pages in parallel through the SSRF-safe client.

HTML becomes Markdown (scripts and styles dropped), other text stays as is. Each item gets
a character window (``offset``/``limit``) out of a budget of 8000 characters shared by the
call, with ``next_offset`` when more remains; the full text is saved as a ``web://``
snapshot readable with ``read_file``. Each URL reports ``success``, ``failed`` (with a
``retry`` code: ``blocked``, ``invalid_url``, ``timeout``, ``network``, ``later``, ``none``)
or ``skipped`` (``retry: next_call``, past the first 8); whatever goes wrong with one URL
(a refused address, a malformed URL, an unresolvable host, a broken page) fails only that
URL.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import structlog
from bs4 import BeautifulSoup
from markdownify import MarkdownConverter
from weft_mcp_client.safe_http import BlockedAddress, FetchedPage, SafeHttpClient
from weft_platform.web_snapshots import SnapshotStore
from weft_tool_catalog.registry import ToolInvocation, ToolOutcome, dumps
from weft_tool_catalog.specs import WEB_FETCH, WEB_FETCH_CHAR_BUDGET, FetchItem, WebFetchArguments

log = structlog.get_logger(__name__)

MAX_PAGES = 8


def page_text(page: FetchedPage) -> str:
    """Markdown for HTML, decoded text otherwise."""
    text = page.body.decode("utf-8", errors="replace")
    if "html" in page.content_type.lower() or text.lstrip()[:15].lower().startswith(
        "<!doctype html"
    ):
        soup = BeautifulSoup(text, "html.parser")
        for node in soup(["script", "style", "noscript", "template", "iframe"]):
            node.decompose()
        return str(MarkdownConverter(heading_style="ATX").convert_soup(soup)).strip()
    return text


class WebFetchTool:
    """Fetches pages; see the module docstring for the output shape."""

    spec = WEB_FETCH

    def __init__(
        self, client: SafeHttpClient, snapshots: SnapshotStore, *, page_timeout_s: float = 180.0
    ):
        self._client = client
        self._snapshots = snapshots
        self._timeout_s = page_timeout_s

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Fetch every item in parallel and report each."""
        items = call.args(WebFetchArguments).items
        wanted = items[:MAX_PAGES]
        share = WEB_FETCH_CHAR_BUDGET // len(wanted)
        results = await asyncio.gather(*(self._one(call, item, share) for item in wanted))
        results += [
            {
                "url": item.url,
                "status": "skipped",
                "reason": f"at most {MAX_PAGES} pages per call",
                "retry": "next_call",
            }
            for item in items[MAX_PAGES:]
        ]
        ok = any(r["status"] == "success" for r in results)
        output = dumps({"results": results})
        return ToolOutcome(
            success=ok,
            output=output,
            # The model reads only the error of a failed call: it carries each URL's status.
            error=None if ok else f"no page could be fetched: {output}",
            display_type="web_fetch_results",
        )

    async def _one(self, call: ToolInvocation, item: FetchItem, share: int) -> dict[str, Any]:
        url = item.url
        try:
            return await self._fetch(call, url, item, share)
        except BlockedAddress as exc:
            return _failed(url, str(exc), "blocked")
        except TimeoutError:
            return _failed(url, "timed out", "timeout")
        except httpx.HTTPError as exc:
            return _failed(url, type(exc).__name__, "network")
        except OSError as exc:  # socket.gaierror: the host does not resolve
            return _failed(url, f"{type(exc).__name__}: {exc}", "network")
        except (ValueError, httpx.InvalidURL) as exc:  # bad port, bracket, IDNA label
            return _failed(url, f"invalid URL: {exc}", "invalid_url")
        except Exception as exc:  # one broken page never takes the others down
            log.exception("web_fetch_page_failed", url=url)
            return _failed(url, f"{type(exc).__name__}: {exc}", "later")

    async def _fetch(
        self, call: ToolInvocation, url: str, item: FetchItem, share: int
    ) -> dict[str, Any]:
        page = await self._client.get(url, self._timeout_s)
        if page.status >= 400:
            retry = "later" if page.status in (429, 502, 503, 504) else "none"
            return _failed(url, f"HTTP {page.status}", retry)
        text = page_text(page)
        path = await self._snapshots.save(call.tenant_id, call.session_id, url, text)
        offset = item.offset
        limit = min(item.limit or share, share)
        window = text[offset : offset + limit]
        result: dict[str, Any] = {
            "url": url,
            "status": "success",
            "content": window,
            "offset": offset,
            "total_chars": len(text),
            "full_output_path": path,
        }
        if offset + limit < len(text):
            result["next_offset"] = offset + limit
        return result


def _failed(url: str, error: str, retry: str) -> dict[str, Any]:
    return {"url": url, "status": "failed", "error": error, "retry": retry}
