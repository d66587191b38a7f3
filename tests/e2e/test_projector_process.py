"""The deployment layout docker-compose and Helm use by default: the gateway with
``WEFT_PROJECTOR=off`` and the projector as its own process (``python -m weft_gateway
projector``). A turn still streams to its SSE client, and with the projector process
stopped, nothing reaches the client: the gateway really projects nothing itself. The
projector process serves its own metrics (docs/observability.md): its consumer's lag and
the process metrics, which the gateway without a projector does not report."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from weft_gateway.app import PROJECTOR_GROUP
from weft_testkit import LocalStack, StackConfig, read_turn

from tests.e2e.test_metrics import scrape, total
from tests.stack_fixtures import stack_log_dir


@pytest.fixture(scope="module")
def split_stack(infra: dict[str, str]) -> Iterator[LocalStack]:
    config = StackConfig(
        log_dir=stack_log_dir("e2e-projector"),
        extra_env={"WEFT_PROJECTOR": "off", "WEFT_TURN_IDLE_TIMEOUT_S": "5"},
    )
    with LocalStack(config) as running:
        yield running


@pytest.fixture(scope="module")
def projector_port(split_stack: LocalStack) -> int:
    """The projector process (``python -m weft_gateway projector``), started once; its HTTP
    port (the stack knows its metrics port by it)."""
    return split_stack.start_extra("gateway", ["projector"])


@pytest.fixture
async def api(split_stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with split_stack.api_client() as client:
        yield client


async def _chat(api: httpx.AsyncClient, stack: LocalStack) -> list[str]:
    created = await api.post("/api/v1/sessions", json={"title": "split"})
    assert created.status_code == 201, created.text
    session_id = created.json()["id"]
    events = await read_turn(
        api,
        f"/api/v1/agent-chat/{session_id}",
        api_key=stack.api_key,
        json_body={"query": "hello", "agent_enabled": False},
    )
    return [event.event for event in events]


async def test_turn_streams_through_the_projector_process(
    api: httpx.AsyncClient, split_stack: LocalStack, projector_port: int
) -> None:
    types = await _chat(api, split_stack)
    assert types[0] == "turn_started" and types[-1] == "complete"
    assert "final_answer" in types and "error" not in types

    # The projector process's own metrics: its group's lag, the process collectors; the
    # gateway, projecting nothing, reports no lag of the projector's group.
    async with httpx.AsyncClient(timeout=10) as client:
        projector = await scrape(client, split_stack.metrics_url_of_port(projector_port))
        gateway = await scrape(client, split_stack.metrics_url("gateway"))
    assert total(projector, "process_cpu_seconds_total") > 0
    lag = [dict(ls) for n, ls in projector if n == "weft_kafka_consumer_lag"]
    assert any(ls["group"] == PROJECTOR_GROUP for ls in lag), lag
    assert not [ls for n, ls in gateway
                if n == "weft_kafka_consumer_lag" and ("group", PROJECTOR_GROUP) in ls]  # fmt: skip

    # Without the projector process the turn still runs, but its events never reach the
    # session stream: the client gets the gateway's idle ending, not the turn.
    assert split_stack.kill("gateway", -1, signal.SIGTERM) in (0, -signal.SIGTERM)
    assert await _chat(api, split_stack) == ["error", "complete"]
