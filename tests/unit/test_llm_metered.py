"""Every model call of the engine, memory and suggestions is metered (issue 37: LLM
latency, time to first token, tokens and errors per model): the wrapper reports what the
model did, and the Prometheus meter counts it under a bounded model label."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY
from weft_llm import (
    LLMCallError,
    LLMRequest,
    LLMResponse,
    MeteredModel,
    StreamSink,
    Usage,
)
from weft_platform.metrics import LLM_METER


class _Sink:
    def __init__(self) -> None:
        self.text = ""

    async def on_reasoning(self, delta: str) -> None:
        pass

    async def on_content(self, delta: str) -> None:
        self.text += delta


class _Model:
    def __init__(self, fail: LLMCallError | None = None) -> None:
        self.fail = fail

    async def stream(self, request: LLMRequest, sink: StreamSink) -> LLMResponse:
        if self.fail is not None:
            raise self.fail
        await sink.on_content("hello")
        usage = Usage(prompt_tokens=7, completion_tokens=3, total_tokens=10)
        return LLMResponse(content="hello", reasoning="", tool_calls=[], finish_reason="stop",
                           usage=usage)  # fmt: skip


def _value(name: str, **labels: Any) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_call_is_timed_counted_and_its_first_token_noted() -> None:
    request = LLMRequest(model="metered-model-a", messages=[{"role": "user", "content": "q"}])
    before = _value("weft_llm_tokens_total", model="metered-model-a", kind="prompt")
    sink = _Sink()
    await MeteredModel(_Model(), LLM_METER).stream(request, sink)
    assert sink.text == "hello", "the deltas still reach the caller's sink"
    assert _value("weft_llm_tokens_total", model="metered-model-a", kind="prompt") == before + 7
    assert _value("weft_llm_tokens_total", model="metered-model-a", kind="completion") >= 3
    assert _value("weft_llm_request_duration_seconds_count", model="metered-model-a") >= 1
    assert _value("weft_llm_time_to_first_token_seconds_count", model="metered-model-a") >= 1


async def test_a_failed_call_is_counted_by_a_bounded_reason() -> None:
    request = LLMRequest(model="metered-model-b", messages=[{"role": "user", "content": "q"}])
    with pytest.raises(LLMCallError):
        await MeteredModel(_Model(LLMCallError("slow down", status=429)), LLM_METER).stream(
            request, _Sink()
        )
    assert _value("weft_llm_errors_total", model="metered-model-b", reason="rate_limited") == 1
    assert _value("weft_llm_request_duration_seconds_count", model="metered-model-b") == 0
