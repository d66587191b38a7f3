"""Turning a policy's reply into the HTTP response, faults applied."""

from __future__ import annotations

import logging

from fastapi.responses import JSONResponse, StreamingResponse
from starlette.requests import Request
from starlette.responses import Response

from weft_scripted_llm.completion import completion_body
from weft_scripted_llm.errors import context_overflow_response, fault_response, no_retry_error
from weft_scripted_llm.faults import hang, paced_events, sleep_ms, unpaced
from weft_scripted_llm.openai_schema import ChatCompletionRequest
from weft_scripted_llm.reply import Reply
from weft_scripted_llm.settings import TEST_DOUBLE_MODEL
from weft_scripted_llm.state import ServerState
from weft_scripted_llm.streaming import new_identity, reply_chunks, stream_events
from weft_scripted_llm.usage import prompt_tokens, usage_for

log = logging.getLogger("weft_scripted_llm")

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


async def respond(
    request: Request, state: ServerState, chat: ChatCompletionRequest, reply: Reply
) -> Response:
    """Wait `delay_ms`, then answer the error, the overflow, the stream or the completion."""
    faults = reply.faults
    await sleep_ms(faults.delay_ms)
    if faults.error is not None:
        log.info("scripted LLM test double: injected error %d", faults.error.status)
        return fault_response(faults.error)
    if faults.context_overflow:
        return context_overflow_response(prompt_tokens(chat))
    if chat.stream:
        return _stream(request, state, chat, reply)
    return await _complete(request, state, chat, reply)


def _stream(
    request: Request, state: ServerState, chat: ChatCompletionRequest, reply: Reply
) -> Response:
    """The SSE stream. Without pacing or stall it is one body, as a provider flushes the
    tokens it already has: the client still decodes every event, but neither side pays a
    write, a read and a task per event (benchmarks of the engine's round overhead run this
    test double on the same CPUs)."""
    chunks = reply_chunks(
        new_identity(chat.model or TEST_DOUBLE_MODEL),
        reply,
        usage_for(chat, reply),
        include_usage=chat.include_usage,
        piece_chars=state.settings.argument_chunk_chars,
    )
    events = stream_events(chunks)
    if unpaced(reply.faults):
        body = b"".join(events)
        return Response(body, media_type="text/event-stream", headers=SSE_HEADERS)
    paced = paced_events(events, reply.faults, request, state.release)
    return StreamingResponse(paced, media_type="text/event-stream", headers=SSE_HEADERS)


async def _complete(
    request: Request, state: ServerState, chat: ChatCompletionRequest, reply: Reply
) -> Response:
    if reply.faults.stall_after_chunks is not None:
        await hang(request, state.release)
        return no_retry_error(500, "scripted LLM: stalled request released", code="stall_released")
    identity = new_identity(chat.model or TEST_DOUBLE_MODEL)
    return JSONResponse(completion_body(identity, reply, usage_for(chat, reply)))
