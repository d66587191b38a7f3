"""web_fetch through the SSRF-safe client against a local HTTP server (SPEC T-13).

Loopback is reachable only because each test sets ``AddressPolicy(allow_loopback=True)``
explicitly; the default policy refuses it. The server runs in a thread on 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from weft_contracts import ToolContext
from weft_tools import ToolInvocation, ToolRegistry
from weft_tools.safe_http import AddressPolicy, SafeHttpClient
from weft_tools.web_fetch import WebFetchTool
from weft_tools.web_snapshots import MemorySnapshotStore

ARTICLE = (
    "<html><head><script>evil()</script></head><body><h1>Title</h1><p>"
    + "word " * 3000
    + "</p></body></html>"
)


class _Pages(BaseHTTPRequestHandler):
    hosts: list[str] = []

    def do_GET(self) -> None:
        _Pages.hosts.append(self.headers.get("Host", ""))
        routes = {
            "/article": (200, "text/html", ARTICLE),
            "/plain": (200, "text/plain", "just text"),
            "/missing": (404, "text/plain", "no"),
        }
        if self.path.startswith("/redirect-to-"):
            self.send_response(302)
            self.send_header("Location", self.path.removeprefix("/redirect-to-").replace("~", "/"))
            self.end_headers()
            return
        status, kind, body = routes.get(self.path, (404, "text/plain", "no"))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()


class FakeDns:
    """Answers from a table and counts lookups (rebinding is a second, different answer)."""

    def __init__(self, answers: dict[str, list[list[str]]]):
        self.answers = answers
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        queue = self.answers[host]
        return queue.pop(0) if len(queue) > 1 else queue[0]


def _registry(
    dns: FakeDns | None = None, loopback: bool = True
) -> tuple[ToolRegistry, MemorySnapshotStore]:
    kwargs = {"resolver": dns} if dns else {}
    client = SafeHttpClient(policy=AddressPolicy(allow_loopback=loopback), **kwargs)  # type: ignore[arg-type]
    snapshots = MemorySnapshotStore()
    registry = ToolRegistry()
    registry.register(WebFetchTool(client, snapshots, page_timeout_s=10))
    return registry, snapshots


async def _fetch(registry: ToolRegistry, items: list[dict[str, object]]) -> list[dict[str, object]]:
    ctx = ToolContext(user_id="u", agent_id="a")
    call = ToolInvocation(
        tenant_id="t", session_id="s", request_id="r", arguments={"items": items}, context=ctx
    )
    outcome = await registry.execute("web_fetch", call)
    return list(json.loads(outcome.output)["results"])


async def test_html_becomes_markdown_paginated_with_a_snapshot(server: int) -> None:  # T-13
    registry, snapshots = _registry()
    url = f"http://127.0.0.1:{server}/article"
    [page] = await _fetch(registry, [{"url": url}])
    assert page["status"] == "success"
    content = str(page["content"])
    assert content.startswith("# Title") and "evil()" not in content
    assert len(content) == 8000 and page["next_offset"] == 8000
    [second] = await _fetch(registry, [{"url": url, "offset": 8000, "limit": 100}])
    assert len(str(second["content"])) == 100
    full = await snapshots.load("t", "s", str(page["full_output_path"]))
    assert full is not None and len(full) == page["total_chars"]


async def test_default_policy_refuses_loopback(server: int) -> None:  # SPEC T-13
    registry, _ = _registry(loopback=False)
    [page] = await _fetch(registry, [{"url": f"http://127.0.0.1:{server}/plain"}])
    assert page["status"] == "failed" and page["retry"] == "blocked"


@pytest.mark.parametrize(
    "address",
    [
        "10.0.0.8",
        "192.168.1.1",
        "172.16.0.1",
        "169.254.169.254",
        "100.100.100.200",
        "0.0.0.0",
        "::1",
        "fe80::1",
        "fd00:ec2::254",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
    ],
)
async def test_private_link_local_and_metadata_addresses_are_refused(address: str) -> None:  # T-13
    registry, _ = _registry(FakeDns({"evil.test": [[address]]}), loopback=False)
    [page] = await _fetch(registry, [{"url": "http://evil.test/"}])
    assert page["status"] == "failed" and page["retry"] == "blocked", page


async def test_one_private_answer_among_public_ones_blocks_the_host() -> None:  # T-13
    registry, _ = _registry(
        FakeDns({"mixed.test": [["93.184.216.34", "127.0.0.1"]]}), loopback=False
    )
    [page] = await _fetch(registry, [{"url": "http://mixed.test/"}])
    assert page["retry"] == "blocked"


async def test_dns_is_pinned_so_a_rebinding_second_answer_is_never_used(
    server: int,
) -> None:  # T-13
    # First answer: the (allowed) test server; any later lookup would say 10.0.0.1. The
    # host name resolves nowhere else, so success proves the connection used the pinned IP.
    dns = FakeDns({"rebind.test": [["127.0.0.1"], ["10.0.0.1"]]})
    registry, _ = _registry(dns)
    [page] = await _fetch(registry, [{"url": f"http://rebind.test:{server}/plain"}])
    assert page["status"] == "success" and page["content"] == "just text"
    assert dns.lookups == ["rebind.test"]
    assert _Pages.hosts[-1] == f"rebind.test:{server}"


async def test_redirects_are_checked_again(server: int) -> None:  # SPEC T-13
    registry, _ = _registry()
    to_metadata = f"http://127.0.0.1:{server}/redirect-to-http:~~169.254.169.254~latest~meta-data"
    to_plain = f"http://127.0.0.1:{server}/redirect-to-~plain"
    pages = await _fetch(registry, [{"url": to_metadata}, {"url": to_plain}])
    assert pages[0]["status"] == "failed" and pages[0]["retry"] == "blocked"
    assert pages[1]["status"] == "success" and pages[1]["content"] == "just text"


async def test_each_url_reports_its_own_status(server: int) -> None:  # SPEC T-13
    registry, _ = _registry()
    items: list[dict[str, object]] = [
        {"url": f"http://127.0.0.1:{server}/plain"},
        {"url": f"http://127.0.0.1:{server}/missing"},
        {"url": "ftp://example.com/file"},
    ] + [{"url": f"http://127.0.0.1:{server}/plain"}] * 7
    pages = await _fetch(registry, items)
    assert [p["status"] for p in pages[:3]] == ["success", "failed", "failed"]
    assert [p["status"] for p in pages[8:]] == ["skipped", "skipped"]
