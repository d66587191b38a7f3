"""web_fetch through the SSRF-safe client against a local HTTP server (SPEC T-13).

Loopback is reachable only because each test sets ``AddressPolicy(allow_loopback=True)``
explicitly; the default policy refuses it. The server runs in a thread on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from weft_contracts import ToolContext
from weft_mcp_client.safe_http import AddressPolicy, BlockedAddress, SafeHttpClient
from weft_platform.web_snapshots import MemorySnapshotStore
from weft_tool_catalog import ToolInvocation, ToolRegistry
from weft_tools.web_fetch import WebFetchTool

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
    plain: dict[str, object] = {"url": f"http://127.0.0.1:{server}/plain"}
    items: list[dict[str, object]] = [
        plain,
        {"url": f"http://127.0.0.1:{server}/missing"},
        {"url": "ftp://example.com/file"},
        *[plain] * 7,
    ]
    pages = await _fetch(registry, items)
    assert [p["status"] for p in pages[:3]] == ["success", "failed", "failed"]
    assert [p["status"] for p in pages[8:]] == ["skipped", "skipped"]


# Every IPv6 form that carries an IPv4 address is judged by that IPv4 address (SPEC T-13):
# a dual-stack socket, a NAT64 gateway or a 6to4/Teredo relay may deliver it there.
EMBEDDED_PRIVATE = {
    "mapped loopback": "::ffff:7f00:1",
    "mapped metadata": "::ffff:a9fe:a9fe",
    "compatible loopback": "::127.0.0.1",
    "compatible private": "::10.0.0.1",
    "compatible metadata": "::169.254.169.254",
    "nat64 loopback": "64:ff9b::127.0.0.1",
    "nat64 private": "64:ff9b::192.168.0.1",
    "nat64 metadata": "64:ff9b::a9fe:a9fe",
    "nat64 local-use": "64:ff9b:1::a9fe:a9fe",
    "nat64 local-use, public ipv4": "64:ff9b:1::808:808",
    "6to4 loopback": "2002:7f00:1::1",
    "6to4 private": "2002:a00:1::1",
    "6to4 metadata": "2002:a9fe:a9fe::",
    "teredo client loopback": "2001:0:808:808::80ff:fffe",  # ~0x80fffffe = 127.0.0.1
    "teredo client metadata": "2001:0:808:808::5601:5601",  # ~0x56015601 = 169.254.169.254
    "teredo server private": "2001:0:a00:1::f7f7:f7f7",  # server 10.0.0.1, client 8.8.8.8
    "teredo server cgnat": "2001:0:6440:1::f7f7:f7f7",  # server 100.64.0.1
}
EMBEDDED_PUBLIC = {
    "mapped": "::ffff:808:808",
    "compatible": "::8.8.8.8",
    "nat64": "64:ff9b::93.184.216.34",
    "6to4": "2002:808:808::1",
    "teredo": "2001:0:808:808::f7f7:f7f7",  # server and client 8.8.8.8
    "plain global ipv6": "2606:4700:4700::1111",
}


@pytest.mark.parametrize("address", EMBEDDED_PRIVATE.values(), ids=EMBEDDED_PRIVATE.keys())
def test_ipv6_forms_carrying_a_private_ipv4_are_refused(address: str) -> None:  # SPEC T-13
    with pytest.raises(BlockedAddress):
        AddressPolicy().check(address)


@pytest.mark.parametrize("address", EMBEDDED_PUBLIC.values(), ids=EMBEDDED_PUBLIC.keys())
def test_ipv6_forms_carrying_a_public_ipv4_are_allowed(address: str) -> None:  # SPEC T-13
    AddressPolicy().check(address)


def test_the_refusal_names_the_carried_ipv4() -> None:  # SPEC T-13
    with pytest.raises(BlockedAddress, match=r"carrying 169\.254\.169\.254"):
        AddressPolicy().check("64:ff9b::a9fe:a9fe")


def test_ipv6_loopback_and_unspecified_are_not_read_as_ipv4_compatible() -> None:  # T-13
    with pytest.raises(BlockedAddress):
        AddressPolicy().check("::")
    with pytest.raises(BlockedAddress):
        AddressPolicy().check("::1")
    AddressPolicy(allow_loopback=True).check("::1")


async def test_hostile_ipv6_answers_fail_only_their_own_url(server: int) -> None:  # T-13
    # The page server is on loopback, which this registry allows: the hostile answers are
    # the non-loopback forms.
    forms = [a for name, a in EMBEDDED_PRIVATE.items() if "loopback" not in name]
    hostile = {f"h{i}.test": [[address]] for i, address in enumerate(forms)}
    dns = FakeDns({"ok.test": [["127.0.0.1"]], **hostile})
    registry, _ = _registry(dns)
    items: list[dict[str, object]] = [{"url": f"http://ok.test:{server}/plain"}]
    items += [{"url": f"http://{host}/"} for host in list(hostile)[:7]]
    pages = await _fetch(registry, items)
    assert pages[0]["status"] == "success" and pages[0]["content"] == "just text"
    assert [(p["status"], p["retry"]) for p in pages[1:]] == [("failed", "blocked")] * 7


class _BrokenDns:
    async def __call__(self, host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


async def test_malformed_and_unresolvable_urls_fail_only_themselves(server: int) -> None:  # T-13
    registry, _ = _registry()
    items: list[dict[str, object]] = [
        {"url": "http://[::1/"},  # unclosed IPv6 bracket
        {"url": "http://127.0.0.1:99999/"},  # port out of range
        {"url": f"http://127.0.0.1:{server}/plain"},
    ]
    pages = await _fetch(registry, items)
    assert [(p["status"], p.get("retry")) for p in pages] == [
        ("failed", "invalid_url"),
        ("failed", "invalid_url"),
        ("success", None),
    ]
    client = SafeHttpClient(policy=AddressPolicy(), resolver=_BrokenDns())
    tool = WebFetchTool(client, MemorySnapshotStore(), page_timeout_s=10)
    nowhere = ToolRegistry()
    nowhere.register(tool)
    [page] = await _fetch(nowhere, [{"url": "http://nowhere.test/"}])
    assert page["status"] == "failed" and page["retry"] == "network"


async def test_when_every_url_fails_the_error_still_lists_each_one() -> None:  # SPEC T-13
    registry, _ = _registry(FakeDns({"a.test": [["10.0.0.1"]]}), loopback=False)
    ctx = ToolContext(user_id="u", agent_id="a")
    items = [{"url": "http://a.test/"}, {"url": "gopher://b.test/"}]
    call = ToolInvocation(
        tenant_id="t", session_id="s", request_id="r", arguments={"items": items}, context=ctx
    )
    outcome = await registry.execute("web_fetch", call)
    assert not outcome.success and outcome.error is not None
    assert "http://a.test/" in outcome.error and "gopher://b.test/" in outcome.error
    assert '"retry":"blocked"' in outcome.error.replace(" ", "")
