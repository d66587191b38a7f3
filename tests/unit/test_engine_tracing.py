"""Spans of a turn (SPEC E-23): one tree across steps and replicas, usage, previews, masking."""

from __future__ import annotations

import time

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from weft_contracts import AgentConfig, AgentStep, ToolCallCompletedData
from weft_engine.state import PendingCall, TurnState
from weft_engine.tracing import (
    OUTPUT_PREVIEW_RUNES,
    TurnTracer,
    build_provider,
    provider_from_settings,
)
from weft_llm import Usage

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"
SECRET_SQL = "SELECT title FROM documents WHERE title = 'Q3 salaries' AND id > 42"


def _state(traceparent: str | None) -> TurnState:
    return TurnState(
        tenant_id="t", session_id="s", request_id="req-1", user_id="u",
        agent=AgentConfig(agent_id="a", model="m"), messages=[], started_at=time.time() - 1,
        traceparent=traceparent,
    )  # fmt: skip


def _pending() -> list[PendingCall]:
    return [
        PendingCall(
            call_id="c1",
            tool_name="database_query",
            arguments={"sql": SECRET_SQL},
            arguments_json="{}",
            timeout_s=60,
            deadline=time.time() + 59,
        )
    ]


def _replica(exporter: InMemorySpanExporter) -> tuple[TurnTracer, TracerProvider]:
    provider = build_provider(exporter, instance_id="engine-test")
    return TurnTracer(provider), provider


def _run_turn(traceparent: str | None) -> dict[str, ReadableSpan]:
    """Round 0 thinks on replica A; its tool result and round 1 land on replica B."""
    exporter = InMemorySpanExporter()
    a, provider_a = _replica(exporter)
    b, provider_b = _replica(exporter)
    state = a.add_usage(a.begin_round(_state(traceparent)), Usage(prompt_tokens=10,
                        completion_tokens=5, total_tokens=15))  # fmt: skip
    state = state.model_copy(update={"pending": _pending()})
    state = TurnState.model_validate_json(state.model_dump_json())  # through Redis
    result = ToolCallCompletedData(
        call_id="c1", tool_name="database_query", success=True, output="é" * 5000
    )
    b.tool_done(state, result)
    state = state.model_copy(update={"round": 1, "steps": [AgentStep(round=0)], "pending": []})
    state = b.begin_round(state)
    state = b.add_usage(state, Usage(prompt_tokens=20, completion_tokens=7, total_tokens=27))
    b.end_turn(state, "completed")
    provider_a.force_flush()
    provider_b.force_flush()
    spans = exporter.get_finished_spans()
    assert len(spans) == 4
    return {s.name: s for s in spans}


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_turn_spans_form_one_tree_across_replicas() -> None:  # SPEC E-23
    spans = _run_turn(f"00-{TRACE_ID}-{PARENT_SPAN}-01")
    execute, tool = spans["agent.execute"], spans["agent.tool.database_query"]
    round0, round1 = spans["agent.round.0"], spans["agent.round.1"]
    assert {s.context.trace_id for s in spans.values()} == {int(TRACE_ID, 16)}
    assert _parent(execute) == int(PARENT_SPAN, 16)  # under the gateway's span
    assert _parent(round0) == _parent(round1) == execute.context.span_id
    assert _parent(tool) == round0.context.span_id
    assert round0.attributes is not None and round0.attributes["weft.round"] == 0
    assert round0.attributes["gen_ai.usage.input_tokens"] == 10
    assert execute.attributes is not None
    assert execute.attributes["gen_ai.usage.input_tokens"] == 30
    assert execute.attributes["gen_ai.usage.output_tokens"] == 12
    assert execute.attributes["weft.status"] == "completed"


def test_tool_span_previews_output_in_runes_and_masks_sql() -> None:  # SPEC E-23
    tool = _run_turn(None)["agent.tool.database_query"]
    assert tool.attributes is not None
    preview = str(tool.attributes["weft.tool.output_preview"])
    assert preview == "é" * OUTPUT_PREVIEW_RUNES  # runes, not bytes
    arguments = str(tool.attributes["weft.tool.arguments"])
    assert "Q3 salaries" not in arguments and "42" not in arguments
    assert "FROM documents WHERE title = " in arguments
    assert tool.start_time is not None and tool.end_time is not None
    assert tool.start_time <= tool.end_time


def test_without_traceparent_the_execute_span_is_the_root() -> None:  # SPEC E-23
    spans = _run_turn(None)
    execute = spans["agent.execute"]
    assert execute.parent is None
    assert {s.context.trace_id for s in spans.values()} == {execute.context.trace_id}


def test_tool_calls_carry_the_tool_span_as_traceparent() -> None:  # SPEC E-23
    exporter = InMemorySpanExporter()
    tracer, _ = _replica(exporter)
    state = _state(f"00-{TRACE_ID}-{PARENT_SPAN}-01")
    parent = tracer.tool_traceparent(state, "c1")
    assert parent is not None and parent.startswith(f"00-{TRACE_ID}-")
    assert parent != state.traceparent


def test_disabled_tracing_changes_nothing() -> None:  # SPEC E-23 (exporter none)
    tracer = TurnTracer(provider_from_settings("none", "x"))
    state = _state(None)
    assert not tracer.enabled
    assert tracer.begin_round(state) is state
    assert (
        tracer.add_usage(state, Usage(prompt_tokens=1, completion_tokens=1, total_tokens=2))
        is state
    )
    assert tracer.tool_traceparent(state, "c1") is None
    tracer.end_turn(state, "completed")  # no provider: nothing to write, no error
    assert provider_from_settings("console", "x") is not None


def _spans_written(traceparent: str | None, ratio: float) -> list[str]:
    exporter = InMemorySpanExporter()
    provider = build_provider(exporter, instance_id="engine-test")
    tracer = TurnTracer(provider, sample_ratio=ratio)
    state = tracer.begin_round(_state(traceparent))
    state = tracer.add_usage(state, Usage(prompt_tokens=1, completion_tokens=1, total_tokens=2))
    assert (state.trace is not None) is tracer.sampled(state)  # sampled out: state untouched
    tracer.end_turn(state, "completed")
    provider.force_flush()
    return sorted(s.name for s in exporter.get_finished_spans())


def test_a_turn_follows_its_requests_sampled_flag_else_the_ratio() -> None:
    written = ["agent.execute", "agent.round.0"]
    assert _spans_written(f"00-{TRACE_ID}-{PARENT_SPAN}-01", 0.0) == written
    assert _spans_written(f"00-{TRACE_ID}-{PARENT_SPAN}-00", 1.0) == []
    assert _spans_written(None, 0.0) == []
    assert _spans_written(None, 1.0) == written
    sampled_out = TurnTracer(build_provider(InMemorySpanExporter()), sample_ratio=1.0)
    unsampled = f"00-{TRACE_ID}-{PARENT_SPAN}-00"
    assert sampled_out.tool_traceparent(_state(unsampled), "c1") == unsampled
