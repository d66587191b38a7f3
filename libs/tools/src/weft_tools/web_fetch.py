"""``web_fetch`` (SPEC T-13): fetch up to 8 pages in parallel through the SSRF-safe client.

HTML becomes Markdown (scripts and styles dropped), other text stays as is. Each item gets
a character window (``offset``/``limit``) out of a budget of 8000 characters shared by the
call, with ``next_offset`` when more remains; the full text is saved as a ``web://``
snapshot readable with ``read_file``. Each URL reports ``success``, ``failed`` (with a
``retry`` code) or ``skipped``; one failure never fails the others.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from bs4 import BeautifulSoup
from markdownify import MarkdownConverter

from weft_tools.registry import ToolInvocation, ToolOutcome, dumps
from weft_tools.safe_http import BlockedAddress, FetchedPage, SafeHttpClient
from weft_tools.specs import WEB_FETCH, WEB_FETCH_CHAR_BUDGET
from weft_tools.web_snapshots import SnapshotStore

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
        items: list[dict[str, Any]] = call.arguments["items"]
        wanted = items[:MAX_PAGES]
        share = WEB_FETCH_CHAR_BUDGET // len(wanted)
        results = await asyncio.gather(*(self._one(call, item, share) for item in wanted))
        results += [
            {
                "url": item["url"],
                "status": "skipped",
                "reason": f"at most {MAX_PAGES} pages per call",
            }
            for item in items[MAX_PAGES:]
        ]
        ok = any(r["status"] == "success" for r in results)
        return ToolOutcome(
            success=ok,
            output=dumps({"results": results}),
            error=None if ok else "no page could be fetched",
            display_type="web_fetch_results",
        )

    async def _one(self, call: ToolInvocation, item: dict[str, Any], share: int) -> dict[str, Any]:
        url = str(item["url"])
        try:
            page = await self._client.get(url, self._timeout_s)
        except BlockedAddress as exc:
            return {"url": url, "status": "failed", "error": str(exc), "retry": "blocked"}
        except TimeoutError:
            return {"url": url, "status": "failed", "error": "timed out", "retry": "timeout"}
        except httpx.HTTPError as exc:
            return {"url": url, "status": "failed", "error": type(exc).__name__, "retry": "network"}
        if page.status >= 400:
            retry = "later" if page.status in (429, 502, 503, 504) else "none"
            return {"url": url, "status": "failed", "error": f"HTTP {page.status}", "retry": retry}
        text = page_text(page)
        path = await self._snapshots.save(call.tenant_id, call.session_id, url, text)
        offset = int(item.get("offset", 0))
        limit = min(int(item.get("limit", share)), share)
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
