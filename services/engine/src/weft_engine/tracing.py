"""OpenTelemetry spans of a turn (SPEC E-23): agent.execute -> agent.round.N -> agent.tool.<name>.

A turn runs as separate steps, possibly on different replicas, so no span object can live
from the start of a turn to its end. Each span is therefore written once, when it ends,
with its recorded start time and an id every replica derives the same way from the
request id (the trace id comes from the request's W3C ``traceparent`` when it has one).
What a later step needs (round start, token usage) travels in ``TurnState.trace``. The
round span of round N is written when round N+1 starts or the turn ends; a tool span when
the engine reports its result (or its timeout); ``agent.execute`` when the turn completes.

Exporters (setting ``WEFT_TRACING_EXPORTER``): ``none`` (default, no work at all),
``console`` (spans as JSON on stdout), ``otlp`` (OTLP over HTTP, configured with the
standard ``OTEL_EXPORTER_OTLP_*`` variables).
"""

from __future__ import annotations

import hashlib
import json
import time
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags
from weft_contracts import ToolCallCompletedData
from weft_llm import Usage
from weft_platform import tracing as platform_tracing
from weft_platform.settings import TracingExporter

from weft_engine.masking import masked_arguments
from weft_engine.state import PendingCall, TurnState, TurnTrace

OUTPUT_PREVIEW_RUNES = 4000
"""Tool output kept in a span (SPEC E-23); a Python ``str`` counts code points, i.e. runes."""

_PRESET_IDS: ContextVar[tuple[int, int] | None] = ContextVar("weft_preset_ids", default=None)


class _PresetIds(RandomIdGenerator):
    """Hands out the ids set in ``_PRESET_IDS`` (derived ids), random ones otherwise."""

    def generate_trace_id(self) -> int:
        preset = _PRESET_IDS.get()
        return preset[0] if preset else super().generate_trace_id()

    def generate_span_id(self) -> int:
        preset = _PRESET_IDS.get()
        return preset[1] if preset else super().generate_span_id()


def build_provider(exporter: SpanExporter, *, instance_id: str = "") -> TracerProvider:
    """A provider whose span ids the engine can derive (tests pass an in-memory exporter)."""
    return platform_tracing.build_provider(
        "weft-engine",
        exporter,
        instance_id=instance_id,
        sampler=ALWAYS_ON,
        id_generator=_PresetIds(),
    )


def provider_from_settings(
    exporter: TracingExporter, instance_id: str, file: str = ""
) -> TracerProvider | None:
    """The provider for the ``WEFT_TRACING_EXPORTER`` setting, or None for ``none``."""
    spans = platform_tracing.span_exporter(exporter, file)
    return None if spans is None else build_provider(spans, instance_id=instance_id)


def _derived_id(request_id: str, name: str, size: int) -> int:
    digest = hashlib.sha256(f"{request_id}:{name}".encode()).digest()
    return int.from_bytes(digest[:size], "big") or 1


def _now_ns() -> int:
    return time.time_ns()


def _ns(epoch_s: float) -> int:
    return int(epoch_s * 1_000_000_000)


class TurnTracer:
    """Writes the spans of turns; disabled (no work, no state change) without a provider.

    Sampling follows the platform's ``ParentBased(TraceIdRatioBased(sample_ratio))``, decided
    the same way on every replica: a turn whose request carries a ``traceparent`` is traced
    when that one's sampled flag is set; a turn without one by the ratio on its derived
    trace id. A turn sampled out costs one check per step and no state change."""

    def __init__(self, provider: TracerProvider | None, *, sample_ratio: float = 1.0):
        self._tracer = provider.get_tracer("weft.engine") if provider is not None else None
        self._bound = TraceIdRatioBased.get_bound_for_rate(sample_ratio)

    def sampled(self, state: TurnState) -> bool:
        """Whether this turn's spans are written."""
        if self._tracer is None:
            return False
        flags = _sampled_flag(state.traceparent)
        if flags is not None:
            return flags
        trace_id = _derived_id(state.request_id, "trace", 16)
        return trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < self._bound

    @property
    def enabled(self) -> bool:
        """Whether spans are written."""
        return self._tracer is not None

    # ids -----------------------------------------------------------------------------

    def _trace_id(self, state: TurnState) -> int:
        parent = _parse_traceparent(state.traceparent)
        return parent[0] if parent else _derived_id(state.request_id, "trace", 16)

    def _context(self, state: TurnState, span_id: int) -> Context:
        parent = SpanContext(
            trace_id=self._trace_id(state), span_id=span_id, is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )  # fmt: skip
        return trace.set_span_in_context(NonRecordingSpan(parent))

    def tool_traceparent(self, state: TurnState, call_id: str) -> str | None:
        """W3C ``traceparent`` naming the tool span, for the worker's own spans."""
        if not self.sampled(state):
            return state.traceparent
        span_id = _derived_id(state.request_id, f"tool:{call_id}", 8)
        return f"00-{self._trace_id(state):032x}-{span_id:016x}-01"

    # rounds and usage ------------------------------------------------------------------

    def begin_round(self, state: TurnState) -> TurnState:
        """Before a think: close the previous round's span when the round moved on."""
        if not self.sampled(state):
            return state
        current = state.trace or TurnTrace()
        if current.round == state.round:
            return state
        if current.round >= 0:
            self._write_round(state, current)
        opened = current.model_copy(
            update={
                "round": state.round,
                "round_started_at": time.time(),
                "round_input_tokens": 0,
                "round_output_tokens": 0,
            }
        )
        return state.model_copy(update={"trace": opened})

    def add_usage(self, state: TurnState, usage: Usage | None) -> TurnState:
        """Count one LLM call's tokens in the round and the turn."""
        if usage is None or not self.sampled(state):
            return state
        current = state.trace or TurnTrace(round=state.round, round_started_at=time.time())
        updated = current.model_copy(
            update={
                "round_input_tokens": current.round_input_tokens + usage.prompt_tokens,
                "round_output_tokens": current.round_output_tokens + usage.completion_tokens,
                "input_tokens": current.input_tokens + usage.prompt_tokens,
                "output_tokens": current.output_tokens + usage.completion_tokens,
            }
        )
        return state.model_copy(update={"trace": updated})

    # spans -----------------------------------------------------------------------------

    def tool_done(self, state: TurnState, result: ToolCallCompletedData) -> None:
        """``agent.tool.<name>``: from dispatch to the result (or the engine's timeout)."""
        if not self.sampled(state):
            return
        call = next((c for c in state.pending if c.call_id == result.call_id), None)
        started = _dispatched_at(call) or time.time()
        arguments = masked_arguments(result.tool_name, call.arguments) if call else {}
        attributes: dict[str, Any] = {
            "weft.round": state.round,
            "weft.tool.name": result.tool_name,
            "weft.tool.call_id": result.call_id,
            "weft.tool.arguments": json.dumps(arguments, ensure_ascii=False, default=str),
            "weft.tool.success": result.success,
            "weft.tool.output_preview": (result.output or "")[:OUTPUT_PREVIEW_RUNES],
        }
        if result.error:
            attributes["weft.tool.error"] = result.error[:OUTPUT_PREVIEW_RUNES]
        parent = _derived_id(state.request_id, f"round:{state.round}", 8)
        own = _derived_id(state.request_id, f"tool:{result.call_id}", 8)
        status = Status(StatusCode.OK) if result.success else Status(StatusCode.ERROR)
        self._write(state, f"agent.tool.{result.tool_name}", parent, own, started, attributes,
                    status)  # fmt: skip

    def end_turn(
        self, state: TurnState, status: str, *, error: tuple[str, str] | None = None
    ) -> None:
        """The open round span and ``agent.execute`` (once, by whoever completes the turn);
        ``error``: the failed turn's code and its detail (the cause as reported, which the
        client does not see)."""
        if not self.sampled(state):
            return
        current = state.trace or TurnTrace()
        if current.round >= 0:
            self._write_round(state, current)
        parent = _parse_traceparent(state.traceparent)
        attributes: dict[str, Any] = {
            "weft.request_id": state.request_id,
            "weft.session_id": state.session_id,
            "weft.tenant_id": state.tenant_id,
            "weft.agent_id": state.agent.agent_id,
            "weft.status": status,
            "weft.rounds": len(state.steps),
            "gen_ai.usage.input_tokens": current.input_tokens,
            "gen_ai.usage.output_tokens": current.output_tokens,
        }
        code = StatusCode.OK if status == "completed" else StatusCode.ERROR
        description = None
        if error is not None:
            attributes["weft.error.code"] = error[0]
            attributes["weft.error.detail"] = description = error[1][:OUTPUT_PREVIEW_RUNES]
        self._write(
            state, "agent.execute", parent[1] if parent else None,
            _derived_id(state.request_id, "execute", 8), state.started_at, attributes,
            Status(code, description),
        )  # fmt: skip

    def _write_round(self, state: TurnState, current: TurnTrace) -> None:
        attributes = {
            "weft.round": current.round,
            "gen_ai.usage.input_tokens": current.round_input_tokens,
            "gen_ai.usage.output_tokens": current.round_output_tokens,
        }
        self._write(
            state, f"agent.round.{current.round}", _derived_id(state.request_id, "execute", 8),
            _derived_id(state.request_id, f"round:{current.round}", 8),
            current.round_started_at, attributes, Status(StatusCode.UNSET),
        )  # fmt: skip

    def _write(
        self, state: TurnState, name: str, parent_id: int | None, span_id: int,
        started_at: float, attributes: dict[str, Any], status: Status,
    ) -> None:  # fmt: skip
        assert self._tracer is not None
        trace_id = self._trace_id(state)
        context = self._context(state, parent_id) if parent_id is not None else Context()
        token = _PRESET_IDS.set((trace_id, span_id))
        try:
            span = self._tracer.start_span(
                name, context=context, attributes=attributes, start_time=_ns(started_at)
            )
        finally:
            _PRESET_IDS.reset(token)
        span.set_status(status)
        span.end(end_time=max(_now_ns(), _ns(started_at)))


def _dispatched_at(call: PendingCall | None) -> float | None:
    if call is None or not call.deadline:
        return None
    return call.deadline - call.timeout_s


def _sampled_flag(value: str | None) -> bool | None:
    """The sampled flag of a well-formed W3C ``traceparent``, None without one."""
    if _parse_traceparent(value) is None:
        return None
    assert value is not None
    try:
        return bool(int(value.strip().split("-")[3], 16) & 0x01)
    except ValueError:
        return None


def _parse_traceparent(value: str | None) -> tuple[int, int] | None:
    """(trace id, span id) of a W3C ``traceparent``, or None when absent or malformed."""
    if not value:
        return None
    parts = value.strip().split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id = int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None
    return (trace_id, span_id) if trace_id and span_id else None
