"""The wiki generation's model calls are metered like every other model call
(docs/observability.md, weft_llm_*): the worker's page writer reports each answered call
with its duration and tokens, and each failed one with a bounded reason, by model."""

from __future__ import annotations

import httpx2
import openai
import pytest
from weft_knowledge.wiki_generation import OpenAIPageWriter
from weft_llm import Usage

MODEL = "wiki-writer-model"


class RecordingMeter:
    """An ``LLMMeter`` that keeps what it was told."""

    def __init__(self) -> None:
        self.answered_calls: list[tuple[str, float, float | None, Usage | None]] = []
        self.failed_calls: list[tuple[str, str]] = []

    def failed(self, model: str, reason: str) -> None:
        self.failed_calls.append((model, reason))

    def answered(
        self, model: str, seconds: float, first_token_s: float | None, usage: Usage | None
    ) -> None:
        self.answered_calls.append((model, seconds, first_token_s, usage))


def _writer(meter: RecordingMeter, answer: httpx2.Response) -> OpenAIPageWriter:
    """The page writer over a provider that gives ``answer`` (openai's own HTTP client,
    httpx2, with a mock transport: no network)."""
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(lambda _: answer))
    client = openai.AsyncOpenAI(
        base_url="http://model.test/v1", api_key="k", max_retries=0, http_client=http
    )
    return OpenAIPageWriter(base_url="", api_key="", model=MODEL, meter=meter, client=client)


def _completion(text: str) -> httpx2.Response:
    body = {
        "id": "c1", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
    }  # fmt: skip
    return httpx2.Response(200, json=body)


async def test_an_answered_call_reports_its_duration_and_tokens() -> None:
    meter = RecordingMeter()
    completion = await _writer(meter, _completion('{"pages": []}')).complete("sys", "doc")
    assert (completion.input_tokens, completion.output_tokens) == (120, 30)
    ((model, seconds, first_token, usage),) = meter.answered_calls
    assert model == MODEL and seconds >= 0 and first_token is None  # not streamed
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (120, 30)
    assert meter.failed_calls == []


async def test_a_refused_call_is_counted_by_a_bounded_reason() -> None:
    meter = RecordingMeter()
    refused = httpx2.Response(
        400, json={"error": {"message": "no", "type": "invalid_request_error"}}
    )
    with pytest.raises(openai.BadRequestError):
        await _writer(meter, refused).complete("sys", "doc")
    assert meter.failed_calls == [(MODEL, "refused")]
    assert meter.answered_calls == []
