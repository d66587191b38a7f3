"""How a failing turn reads to the client (SPEC E-07, E-20 unrecoverable LLM failure): a
stable code and a clean message in the ``error`` event; the provider's own text only in
logs and the turn's span."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast
from unittest.mock import AsyncMock

import pytest
from aiokafka.errors import KafkaTimeoutError
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from weft_contracts import (
    AgentConfig,
    ChatRequested,
    ChatRequestedData,
    ErrorCode,
    ErrorData,
)
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
from weft_engine.sessions import SessionGate
from weft_engine.state import TurnState, TurnStore
from weft_engine.tracing import TurnTracer, build_provider
from weft_llm import ContextOverflowError, LLMCallError, ModelStalledError, TransientLLMError

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


def _finisher_handing_over(queued: ChatRequested) -> Finisher:
    sessions = AsyncMock()
    sessions.hand_over.return_value = queued
    return Finisher(
        emitter=cast(EventEmitter, _Emitter()), store=cast(TurnStore, AsyncMock()),
        leases=cast(TurnLeases, AsyncMock()), sessions=cast(SessionGate, sessions),
    )  # fmt: skip


async def test_a_queued_request_whose_start_fails_goes_back_to_the_bus() -> None:
    """``hand_over`` took the next request off the session's queue; when starting it
    fails (here: its ``turn_started`` could not be published), it is handed back to
    ``agent.requests`` instead of being lost, and the ending turn still ends cleanly."""
    data = ChatRequestedData(query="q", user_id="u", agent=AgentConfig(agent_id="a", model="m"))
    queued = ChatRequested(tenant_id="t", session_id="s", request_id="req-2", data=data)
    state = TurnState(
        tenant_id="t", session_id="s", request_id="req-1", user_id="u",
        agent=AgentConfig(agent_id="a", model="m"), messages=[], started_at=time.time(),
    )  # fmt: skip
    requeued: list[ChatRequested] = []

    async def requeue(request: ChatRequested) -> None:
        requeued.append(request)

    async def start(request: ChatRequested, previous: str) -> None:
        raise KafkaTimeoutError("turn_started not acknowledged")

    finisher = _finisher_handing_over(queued)
    finisher.start_queued, finisher.requeue = start, requeue
    await finisher.forget(state)
    assert requeued == [queued]

    async def cancelled(request: ChatRequested, previous: str) -> None:
        raise asyncio.CancelledError

    finisher.start_queued = cancelled
    with pytest.raises(asyncio.CancelledError):
        await finisher.forget(state)
    assert requeued == [queued, queued], "a shutdown mid-start hands it back too"
