"""A local fake of the Brave Search API (test double) for ``web_search`` tests.

It speaks the real shape: ``GET /res/v1/web/search?q=&count=[&country=&freshness=]`` with
the ``X-Subscription-Token`` header, answering ``{"type": "search", "web": {"results":
[{"title", "url", "description"}]}}``, or Brave's error body ``{"type": "ErrorResponse",
"error": {"status", "code", "detail"}}``. Faults are chosen by a word in the query so that
worker processes can trigger them too: ``boom`` (HTTP 500), ``slow`` (answers after
``slow_s``), ``garbled`` (200 with invalid JSON), ``refused`` (422). Result URLs point at
``/page/<n>`` on the same server, a small HTML page, for ``content=true``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

SEARCH_PATH = "/res/v1/web/search"


@dataclass
class FakeSearchState:
    """What the fake expects and what it received."""

    api_key: str
    slow_s: float = 3.0
    requests: list[dict[str, Any]] = field(default_factory=list)


class FakeBraveSearch:
    """Runs the fake on 127.0.0.1 in a thread; use as a context manager."""

    def __init__(self, api_key: str = "fake-brave-key", *, slow_s: float = 3.0):
        self.state = FakeSearchState(api_key=api_key, slow_s=slow_s)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """Base URL to configure as the provider's."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeBraveSearch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(state: FakeSearchState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            if url.path.startswith("/page/"):
                page = url.path.rsplit("/", 1)[1]
                html = f"<html><body><h1>Page {page}</h1><p>Body of page {page}.</p></body></html>"
                self._send(200, html.encode(), "text/html")
                return
            if url.path != SEARCH_PATH:
                self._error(404, "NOT_FOUND", "unknown path")
                return
            params = {k: v[0] for k, v in parse_qs(url.query).items()}
            state.requests.append({"params": params, "headers": dict(self.headers.items())})
            self._search(params)

        def _search(self, params: dict[str, str]) -> None:
            if self.headers.get("X-Subscription-Token") != state.api_key:
                self._error(401, "SUBSCRIPTION_TOKEN_INVALID", "The provided token is invalid.")
                return
            query = params.get("q", "")
            if "boom" in query:
                self._error(500, "INTERNAL", "Something went wrong on our side.")
            elif "refused" in query:
                self._error(422, "VALIDATION", "Unable to validate request parameter(s).")
            elif "garbled" in query:
                self._send(200, b'{"type": "search", "web": {"results": [', "application/json")
            else:
                if "slow" in query:
                    time.sleep(state.slow_s)
                self._results(query, int(params.get("count", "5")))

        def _results(self, query: str, count: int) -> None:
            # self.server is typed as socketserver.BaseServer; it is our HTTPServer here
            base = f"http://127.0.0.1:{self.server.server_port}"  # type: ignore[attr-defined]
            results = [
                {"title": f"{query} result {n}", "url": f"{base}/page/{n}",
                 "description": f"Snippet {n} about {query}.", "age": "1 day ago"}
                for n in range(1, min(count, 20) + 1)
            ]  # fmt: skip
            body = {"type": "search", "query": {"original": query}, "web": {"type": "search",
                    "results": results}}  # fmt: skip
            self._send(200, json.dumps(body).encode(), "application/json")

        def _error(self, status: int, code: str, detail: str) -> None:
            body = {"type": "ErrorResponse", "error": {"id": "fake", "status": status,
                    "code": code, "detail": detail}}  # fmt: skip
            self._send(status, json.dumps(body).encode(), "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Handler
