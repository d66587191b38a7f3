"""Internal HTTP calls wait out a brief outage (``weft_platform.retry``): what is tried
again (a refused connection, a timeout, a 5xx), what never is (a 4xx; a non-idempotent
request that may have reached the service), and that the window bounds the tries. The
engine's memory client and the gateway's clients are checked through the same helper."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from fastapi import HTTPException
from weft_contracts import AgentConfig
from weft_engine.history_client import HistoryClient, MemoryUnavailable
from weft_gateway.clients import AgentConfigClient, SessionsClient
from weft_platform.retry import RetryWindow, request_within

QUICK = RetryWindow(window_s=30, first_backoff_s=0.001, max_backoff_s=0.002)
"""Long enough never to run out in these tests, with pauses too short to matter."""

Answer = Callable[[httpx.Request], httpx.Response]


class Outage:
    """A transport that fails its first ``failures`` requests with ``failure`` (an
    exception or a status code), then answers ``then``; counts what it was sent."""

    def __init__(
        self,
        failures: int,
        failure: type[httpx.TransportError] | int,
        then: Answer = lambda _: httpx.Response(200, json={}),
    ):
        self.failures = failures
        self.failure = failure
        self.then = then
        self.sent: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        if len(self.sent) > self.failures:
            return self.then(request)
        if isinstance(self.failure, int):
            return httpx.Response(self.failure, text="down")
        raise self.failure("outage", request=request)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url="http://svc", transport=httpx.MockTransport(self))


@pytest.mark.parametrize(
    "failure", [httpx.ConnectError, httpx.ReadTimeout, httpx.RemoteProtocolError, 502, 503]
)
async def test_a_brief_outage_is_waited_out(failure: type[httpx.TransportError] | int) -> None:
    outage = Outage(3, failure)
    async with outage.client() as http:
        resp = await request_within(http, QUICK, "GET", "/x")
    assert resp.status_code == 200 and len(outage.sent) == 4


@pytest.mark.parametrize("status", [400, 404, 409, 422])
async def test_a_4xx_is_final_and_sent_once(status: int) -> None:
    outage = Outage(5, status)
    async with outage.client() as http:
        resp = await request_within(http, QUICK, "GET", "/x")
    assert resp.status_code == status and len(outage.sent) == 1


async def test_a_request_that_may_have_arrived_is_resent_only_when_idempotent() -> None:
    """A 5xx or a timeout may follow a create that was done: sent once. A refused
    connection never reached the service: tried again even for a create."""
    for failure in (503, httpx.ReadTimeout):
        outage = Outage(1, failure)
        async with outage.client() as http:
            if isinstance(failure, int):
                resp = await request_within(http, QUICK, "POST", "/x", resend=False)
                assert resp.status_code == 503
            else:
                with pytest.raises(httpx.ReadTimeout):
                    await request_within(http, QUICK, "POST", "/x", resend=False)
        assert len(outage.sent) == 1, failure
    refused = Outage(2, httpx.ConnectError)
    async with refused.client() as http:
        resp = await request_within(http, QUICK, "POST", "/x", resend=False)
    assert resp.status_code == 200 and len(refused.sent) == 3


async def test_the_window_bounds_the_tries_and_the_last_failure_is_reported() -> None:
    """An outage longer than the window: the tries stop (the call returns at all) with
    the last failure, after more than one try; a zero window tries once."""
    down = Outage(10_000, httpx.ConnectError)
    window = RetryWindow(window_s=0.3, first_backoff_s=0.01, max_backoff_s=0.02)
    async with down.client() as http:
        with pytest.raises(httpx.ConnectError):
            await request_within(http, window, "GET", "/x")
        tries = len(down.sent)
        assert 1 < tries < 10_000
        with pytest.raises(httpx.ConnectError):
            await request_within(http, RetryWindow(window_s=0), "GET", "/x")
    assert len(down.sent) == tries + 1
    failing = Outage(10_000, 503)
    async with failing.client() as http:
        resp = await request_within(http, window, "GET", "/x")
    assert resp.status_code == 503 and len(failing.sent) > 1


def _history(outage: Outage, window: RetryWindow = QUICK) -> HistoryClient:
    return HistoryClient("http://memory", transport=httpx.MockTransport(outage), retry=window)


async def test_the_engine_history_call_waits_for_a_restarting_memory() -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "turns": []}
    outage = Outage(4, httpx.ConnectError, then=lambda _: httpx.Response(200, json=body))
    client = _history(outage)
    history = await client.history("t", "s", token_budget=1000)
    assert history.messages == body["messages"] and len(outage.sent) == 5
    await client.aclose()


async def test_the_engine_gives_up_on_memory_after_its_window_and_never_retries_a_4xx() -> None:
    down = _history(Outage(10_000, 503), RetryWindow(window_s=0.2, first_backoff_s=0.01))
    with pytest.raises(MemoryUnavailable, match="503"):
        await down.history("t", "s", token_budget=1000)
    refused = Outage(10_000, 400)
    with pytest.raises(MemoryUnavailable, match="400"):
        await _history(refused).history("t", "s", token_budget=1000)
    assert len(refused.sent) == 1
    missing = Outage(10_000, 404)
    assert (await _history(missing).history("t", "s", token_budget=1000)).messages == []
    assert len(missing.sent) == 1


async def test_the_gateway_retries_reads_and_resolution_but_not_a_create_that_may_have_landed() -> (
    None
):
    reads = Outage(2, 503, then=lambda _: httpx.Response(200, json={"id": "s1"}))
    memory = SessionsClient("http://m", "memory", transport=httpx.MockTransport(reads), retry=QUICK)
    assert (await memory.get_session("t", "u", "s1"))["id"] == "s1"
    assert len(reads.sent) == 3

    creates = Outage(1, 503)
    memory = SessionsClient(
        "http://m", "memory", transport=httpx.MockTransport(creates), retry=QUICK
    )
    with pytest.raises(HTTPException) as refused:
        await memory.create_session("t", "u", "title", None)
    assert refused.value.status_code == 503 and refused.value.headers == {"Retry-After": "2"}
    assert len(creates.sent) == 1

    config = AgentConfig(agent_id="a", model="m").model_dump(mode="json")
    resolving = Outage(2, httpx.ReadTimeout, then=lambda _: httpx.Response(200, json=config))
    agents = AgentConfigClient(
        "http://a", "agent-config", transport=httpx.MockTransport(resolving), retry=QUICK
    )
    assert (await agents.resolve("t", "a", None)).agent_id == "a"  # a lookup: resent
    assert len(resolving.sent) == 3


async def test_the_gateway_fail_fast_lookup_is_not_retried() -> None:
    """The chat path's session lookup has its own short timeout: it answers 503 at once
    instead of holding the chat request for the retry window."""
    outage = Outage(5, httpx.ConnectError)
    memory = SessionsClient(
        "http://m", "memory", transport=httpx.MockTransport(outage), retry=QUICK
    )
    with pytest.raises(HTTPException) as refused:
        await memory.get_session("t", "u", "s1", timeout_s=0.5)
    assert refused.value.status_code == 503 and len(outage.sent) == 1
