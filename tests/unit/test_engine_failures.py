"""How a failing turn reads to the client (SPEC E-07, E-20 unrecoverable LLM failure): a
stable code and a clean message in the ``error`` event; the provider's own text only in
logs and the turn's span."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, cast
from unittest.mock import AsyncMock

import pytest
from aiokafka.errors import KafkaTimeoutError
from fakeredis import FakeAsyncRedis
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from weft_contracts import (
    AgentConfig,
    ChatRequested,
    ChatRequestedData,
    ErrorCode,
    ErrorData,
)
from weft_engine import sessions as sessions_module
from weft_engine.emitter import EventEmitter
from weft_engine.finalize import (
    MODEL_BUSY,
    MODEL_CONTEXT_FULL,
    MODEL_REFUSED,
    MODEL_UNAVAILABLE,
    Finisher,
    llm_failure,
)
from weft_engine.leases import TurnLeases
from weft_engine.sessions import START_LEASE_S, START_RETRY_S, HandedOver, SessionGate
from weft_engine.state import TurnState, TurnStore
from weft_engine.tracing import TurnTracer, build_provider
from weft_llm import ContextOverflowError, LLMCallError, ModelStalledError, TransientLLMError
from weft_platform.credentials import ensure_dev_keys, load_signer

UPSTREAM = (
    "model returned HTTP 503: Error code: 503 - {'error': {'message': 'overloaded', "
    "'host': 'gpu-pool-7.internal', 'request_id': 'req_abc123'}}"
)


def test_a_provider_failure_gets_a_stable_code_and_a_clean_message() -> None:
    failure = llm_failure(TransientLLMError(UPSTREAM, status=503))
    assert (failure.code, failure.message, failure.retryable) == (
        ErrorCode.LLM_ERROR, MODEL_UNAVAILABLE, True,
    )  # fmt: skip
    assert "gpu-pool-7.internal" in failure.detail and "HTTP 503" in failure.detail


def test_the_message_follows_the_cause_never_its_text() -> None:
    cases = [
        (TransientLLMError("Error code: 429 - slow down", status=429), MODEL_BUSY),
        (ModelStalledError("no output from the model for 120s", stalled_s=120),
         "The model sent no output for 120s. Try again in a moment."),
        (TransientLLMError("model unreachable: ConnectError"), MODEL_UNAVAILABLE),
        (
            ContextOverflowError("Error code: 400 - maximum context length exceeded",
                                 status=400),
            MODEL_CONTEXT_FULL,
        ),
        (LLMCallError("Error code: 401 - bad key sk-12", status=401),
         MODEL_REFUSED),
    ]  # fmt: skip
    for exc, message in cases:
        failure = llm_failure(exc)
        assert failure.code is ErrorCode.LLM_ERROR and failure.message == message, exc
        assert "Error code" not in failure.message and str(exc) in failure.detail
    assert llm_failure(cases[-1][0]).retryable is False


class _Emitter:
    def __init__(self) -> None:
        self.errors: list[ErrorData] = []

    async def emit(self, event_type: Any, ids: dict[str, Any], data: Any, **_: Any) -> None:
        if isinstance(data, ErrorData):
            self.errors.append(data)

    async def complete(self, ids: dict[str, Any], data: Any) -> bool:
        return True

    async def clear_streaming(self, request_id: str) -> None:
        return None


async def test_the_error_event_is_clean_and_the_span_keeps_the_detail() -> None:
    emitter = _Emitter()
    exporter = InMemorySpanExporter()
    provider = build_provider(exporter, instance_id="engine-test")
    sessions = AsyncMock()
    sessions.hand_over.return_value = None
    finisher = Finisher(
        emitter=cast(EventEmitter, emitter), store=cast(TurnStore, AsyncMock()),
        leases=cast(TurnLeases, AsyncMock()), sessions=cast(SessionGate, sessions),
        tracer=TurnTracer(provider),
    )  # fmt: skip
    state = TurnState(
        tenant_id="t", session_id="s", request_id="req-1", user_id="u",
        agent=AgentConfig(agent_id="a", model="m"), messages=[], started_at=time.time(),
    )  # fmt: skip
    await finisher.fail(state, llm_failure(TransientLLMError(UPSTREAM, status=503)))

    [error] = emitter.errors
    assert error.model_dump() == {
        "code": "llm_error", "message": MODEL_UNAVAILABLE, "retryable": True,
    }  # fmt: skip
    provider.force_flush()
    [execute] = [s for s in exporter.get_finished_spans() if s.name == "agent.execute"]
    assert execute.attributes is not None
    assert execute.attributes["weft.error.code"] == "llm_error"
    assert "gpu-pool-7.internal" in str(execute.attributes["weft.error.detail"])
    assert "gpu-pool-7.internal" in str(execute.status.description)


async def test_a_queued_request_whose_start_fails_stays_a_pending_start() -> None:
    """``hand_over`` took the next request off the session's queue and made it the running
    turn; when opening it fails (here: its ``turn_started`` could not be published), it
    stays in Redis as a pending start, due again shortly, for any replica to start, and
    the ending turn still ends cleanly. The engine never writes ``agent.requests``
    (ARCHITECTURE: only the gateway does). A cancelled start leaves it due after its
    lease."""
    redis = FakeAsyncRedis()
    sessions = SessionGate(redis, 60, starts_key="weft:test:starts")
    data = ChatRequestedData(query="q", user_id="u", agent=AgentConfig(agent_id="a", model="m"))
    queued = ChatRequested(tenant_id="t", session_id="s", request_id="req-2", data=data)
    state = TurnState(
        tenant_id="t", session_id="s", request_id="req-1", user_id="u",
        agent=AgentConfig(agent_id="a", model="m"), messages=[], started_at=time.time(),
    )  # fmt: skip
    await sessions.claim("t", "s", "req-1")
    await sessions.enqueue(queued)
    tried: list[HandedOver] = []

    async def start(handed: HandedOver) -> None:
        tried.append(handed)
        raise KafkaTimeoutError("turn_started not acknowledged")

    finisher = Finisher(
        emitter=cast(EventEmitter, _Emitter()), store=cast(TurnStore, AsyncMock()),
        leases=cast(TurnLeases, AsyncMock()), sessions=sessions,
    )  # fmt: skip
    finisher.start_queued = start
    await finisher.forget(state)
    [handed] = tried
    assert (handed.request, handed.previous) == (queued, "req-1")
    assert await sessions.active("t", "s") == "req-2"  # the session waits for it
    assert await sessions.due_starts() == []  # not due yet
    due = await _due(redis)
    assert 0 < due - time.time() <= START_RETRY_S
    await sessions.postpone(handed, -1)  # its retry time came
    [again] = await sessions.due_starts()
    assert again.request == queued and again.previous == "req-1"
    assert await sessions.due_starts() == [], "taken by this replica for its lease"
    await sessions.started(again)
    assert await redis.zcard("weft:test:starts") == 0
    await redis.aclose()


async def _due(redis: FakeAsyncRedis) -> float:
    """The one pending start's due time."""
    entries: Any = await redis.zrange("weft:test:starts", 0, -1, withscores=True)
    [(_, due)] = entries
    return float(due)


async def _queued_behind_req_1(redis: FakeAsyncRedis) -> SessionGate:
    """A gate whose session runs req-1 with req-2 queued behind it."""
    sessions = SessionGate(redis, 60, starts_key="weft:test:starts")
    data = ChatRequestedData(query="q", user_id="u", agent=AgentConfig(agent_id="a", model="m"))
    await sessions.claim("t", "s", "req-1")
    await sessions.enqueue(ChatRequested(tenant_id="t", session_id="s", request_id="req-2",
                                         data=data))  # fmt: skip
    return sessions


async def test_a_start_cancelled_midway_stays_pending_for_its_lease() -> None:
    redis = FakeAsyncRedis()
    sessions = await _queued_behind_req_1(redis)

    async def cancelled(handed: HandedOver) -> None:
        raise asyncio.CancelledError

    finisher = Finisher(
        emitter=cast(EventEmitter, _Emitter()), store=cast(TurnStore, AsyncMock()),
        leases=cast(TurnLeases, AsyncMock()), sessions=sessions,
    )  # fmt: skip
    finisher.start_queued = cancelled
    state = TurnState(
        tenant_id="t", session_id="s", request_id="req-1", user_id="u",
        agent=AgentConfig(agent_id="a", model="m"), messages=[], started_at=time.time(),
    )  # fmt: skip
    with pytest.raises(asyncio.CancelledError):
        await finisher.forget(state)
    due = await _due(redis)
    assert due - time.time() > START_LEASE_S - 5  # a shutdown mid-start: due after the lease
    await redis.aclose()


async def test_a_start_in_progress_keeps_its_pending_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """While a replica opens a handed-over turn (which may wait out a broker outage), it
    renews the pending start, so no other replica takes it; once it stops renewing, the
    start is due within the short lease."""
    monkeypatch.setattr(sessions_module, "START_RENEW_S", 0.05)
    redis = FakeAsyncRedis()
    sessions = await _queued_behind_req_1(redis)
    handed = await sessions.hand_over("t", "s", "req-1")
    assert handed is not None
    await sessions.postpone(handed, 0.2)  # about to be due
    async with sessions.starting(handed):
        await asyncio.sleep(0.5)
        assert await sessions.due_starts() == [], "renewed while the start runs"
    assert START_LEASE_S - 1 < await _due(redis) - time.time() <= START_LEASE_S
    await redis.aclose()


class _Recording(_Emitter):
    """Keeps the envelope fields of every event."""

    def __init__(self) -> None:
        super().__init__()
        self.credentials: list[str | None] = []

    async def emit(self, event_type: Any, ids: dict[str, Any], data: Any, **_: Any) -> None:
        self.credentials.append(ids.get("credential"))

    async def complete(self, ids: dict[str, Any], data: Any) -> bool:
        self.credentials.append(ids.get("credential"))
        return True


@pytest.mark.parametrize("issued_ago_s", [0, 3700], ids=["live", "outlived"])
async def test_a_turn_that_outlived_its_credential_still_ends_where_clients_see_it(
    tmp_path: Path, issued_ago_s: float
) -> None:
    """A request queued behind long turns can start after its request credential ran out;
    its closing events (here error and complete) would be dead-lettered by every consumer
    and its client would learn nothing until its idle timeout. They carry the engine's own
    credential for agent.events instead; a turn with a live credential keeps its own."""
    ensure_dev_keys(tmp_path, ["gateway"])
    token = load_signer(tmp_path, "gateway").request(
        tenant_id="t", user_id="u", session_id="s", request_id="req-1", audience=["kafka"],
        ttl_s=3600, issued_at=time.time() - issued_ago_s,
    )  # fmt: skip
    emitter = _Recording()
    sessions = AsyncMock()
    sessions.hand_over.return_value = None
    finisher = Finisher(
        emitter=cast(EventEmitter, emitter), store=cast(TurnStore, AsyncMock()),
        leases=cast(TurnLeases, AsyncMock()), sessions=cast(SessionGate, sessions),
    )  # fmt: skip
    finisher.own_credential = lambda: "engine-credential"
    state = TurnState(
        tenant_id="t", session_id="s", request_id="req-1", user_id="u", credential=token,
        agent=AgentConfig(agent_id="a", model="m"), messages=[], started_at=time.time(),
    )  # fmt: skip
    await finisher.fail(state, llm_failure(TransientLLMError(UPSTREAM, status=503)))
    expected = token if issued_ago_s == 0 else "engine-credential"
    assert emitter.credentials == [expected, expected]
