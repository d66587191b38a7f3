"""``ChatModel`` over any OpenAI-compatible endpoint, through the ``openai`` package.

Pointing Weft at a real provider is configuration: ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``
and the model name.

The request goes through the client's ``post`` with the chunks kept as plain dicts: the
typed ``chat.completions.create`` walks every message and tool definition through its
TypedDict transform and builds a model object per chunk, which costs the engine more CPU
per round than the rest of the loop together.

The HTTP transport is the ``openai`` package's own aiohttp client by default
(``openai.DefaultAioHttpClient``, the package's ``aiohttp`` extra): the client's request
building, retries and error types stay the same, but the bytes go through aiohttp's C
HTTP parser instead of the pure-Python httpcore/h11 stack, which was the larger part of
the client's CPU per call. ``http_backend="httpx"`` keeps the package's default client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import openai
from openai import AsyncOpenAI
from weft_contracts.text import clean_text

from weft_llm.model import (
    ContextOverflowError,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    ModelStalledError,
    StreamSink,
    ToolCallRequest,
    TransientLLMError,
    Usage,
    finish_reason,
)

_TRANSIENT_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}

OVERFLOW_MARKERS = ("context_length_exceeded", "maximum context length", "context window")
"""How providers word a request too long for the model (OpenAI's error code, its
message, and other providers' messages) in a 400's body (SPEC E-25)."""

HttpBackend = Literal["aiohttp", "httpx"]


@dataclass
class _Accumulator:
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage | None = None

    def add_tool_delta(self, delta: dict[str, Any]) -> None:
        slot = self.calls.setdefault(delta.get("index", 0), {"id": "", "name": "", "arguments": ""})
        if delta.get("id"):
            slot["id"] = delta["id"]
        function = delta.get("function") or {}
        slot["name"] += _text(function.get("name")) or ""
        slot["arguments"] += _text(function.get("arguments")) or ""

    def result(self) -> LLMResponse:
        calls = [
            ToolCallRequest(id=c["id"], name=c["name"], arguments=c["arguments"])
            for _, c in sorted(self.calls.items())
        ]
        return LLMResponse(
            content="".join(self.content),
            reasoning="".join(self.reasoning),
            tool_calls=calls,
            finish_reason=finish_reason(self.finish_reason, has_tool_calls=bool(calls)),
            usage=self.usage,
        )


def wire_reasoning_effort(level: str | None) -> str | None:
    """The ``reasoning_effort`` parameter for a Weft level (SPEC A-05), None = omit it.

    ``auto`` omits the parameter so the model uses its own default; ``off`` is sent as
    ``none`` (OpenAI's value for "no reasoning"); every other level is sent as is, since
    agent-config has already clamped it to the levels the model accepts.
    """
    if level is None or level == "auto":
        return None
    return "none" if level == "off" else level


class OpenAIChatModel:
    """Streams chat completions; retries are the caller's policy (the engine's, SPEC E-07)."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        request_timeout_s: float = 600.0,
        http_backend: HttpBackend = "aiohttp",
    ):
        http_client = openai.DefaultAioHttpClient() if http_backend == "aiohttp" else None
        self._client = AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            max_retries=0,
            timeout=request_timeout_s,
            http_client=http_client,
        )

    async def stream(self, request: LLMRequest, sink: StreamSink) -> LLMResponse:
        """Stream one completion into ``sink`` and return the whole of it."""
        acc = _Accumulator()
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a user stop.
            async with asyncio.timeout(request.stall_timeout_s):
                chunks = await self._open(request)
            async for chunk in _with_stall_timeout(chunks, request.stall_timeout_s):
                await _absorb(chunk, acc, sink)
        except TimeoutError as exc:
            raise ModelStalledError(
                f"no output from the model for {request.stall_timeout_s:.0f}s",
                stalled_s=request.stall_timeout_s,
            ) from exc
        except openai.APIStatusError as exc:
            raise status_error(exc.status_code, exc.message, exc.code) from exc
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise TransientLLMError(f"model unreachable: {exc}") from exc
        return acc.result()

    async def _open(self, request: LLMRequest) -> Any:
        kwargs: dict[str, Any] = {
            "model": request.model,
            "messages": request.messages,
            "temperature": request.temperature,
            "max_completion_tokens": request.max_completion_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        effort = wire_reasoning_effort(request.reasoning_effort)
        if effort is not None:
            kwargs["reasoning_effort"] = effort
        if request.tools:
            kwargs["tools"] = request.tools
            if request.tool_choice:
                kwargs["tool_choice"] = request.tool_choice
        return await self._client.post(
            "/chat/completions",
            body=kwargs,
            cast_to=object,
            stream=True,
            stream_cls=openai.AsyncStream[object],
        )

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()


def status_error(status: int, message: str, code: str | None = None) -> LLMCallError:
    """The error for a provider's HTTP error answer: transient (SPEC E-07), context
    overflow (SPEC E-25: a 400 whose code or message names the context), or final."""
    text = f"model returned HTTP {status}: {message}"
    if status in _TRANSIENT_STATUS:
        return TransientLLMError(text, status=status)
    wording = f"{code or ''} {message}".lower()
    if status == 400 and any(marker in wording for marker in OVERFLOW_MARKERS):
        return ContextOverflowError(text, status=status)
    return LLMCallError(text, status=status)


async def _with_stall_timeout(stream: Any, stall_s: float) -> AsyncIterator[Any]:
    """The stream's chunks, ``TimeoutError`` after ``stall_s`` without one (SPEC E-06).

    Python 3.11's ``asyncio.wait_for`` returns the result when a cancel lands in the loop
    iteration the chunk arrives in, so a user stop would be lost; ``asyncio.timeout``
    keeps the cancel.
    """
    iterator = stream.__aiter__()
    while True:
        try:
            async with asyncio.timeout(stall_s):
                chunk = await iterator.__anext__()
        except StopAsyncIteration:
            return
        yield chunk


async def _absorb(chunk: Any, acc: _Accumulator, sink: StreamSink) -> None:
    """Fold one ``chat.completion.chunk`` (a decoded JSON object) into ``acc``."""
    if not isinstance(chunk, dict):
        return
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        acc.usage = Usage(
            prompt_tokens=usage.get("prompt_tokens") or 0,
            completion_tokens=usage.get("completion_tokens") or 0,
            total_tokens=usage.get("total_tokens") or 0,
        )
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        # A model may emit NUL or a lone surrogate (a JSON "\ud800" escape): neither can be
        # stored or published, so the text is cleaned before anything keeps it.
        reasoning = _text(delta.get("reasoning_content"))
        if reasoning:
            acc.reasoning.append(reasoning)
            await sink.on_reasoning(reasoning)
        content = _text(delta.get("content"))
        if content:
            acc.content.append(content)
            await sink.on_content(content)
        for tool_delta in delta.get("tool_calls") or []:
            acc.add_tool_delta(tool_delta)
        if choice.get("finish_reason"):
            acc.finish_reason = choice["finish_reason"]


def _text(value: object) -> str | None:
    return clean_text(value) if isinstance(value, str) else None
