"""The OpenAI-compatible endpoints: chat completions, embeddings, models."""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from fastapi import APIRouter
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from weft_scripted_llm.embeddings import embeddings_body
from weft_scripted_llm.errors import error_response, no_retry_error
from weft_scripted_llm.openai_schema import ChatCompletionRequest, EmbeddingRequest
from weft_scripted_llm.policy import ScriptExhaustedError
from weft_scripted_llm.responder import respond
from weft_scripted_llm.settings import TEST_DOUBLE_EMBEDDING_MODEL, TEST_DOUBLE_MODEL
from weft_scripted_llm.state import state_of

CONVERSATION_HEADER = "x-scripted-llm-conversation"
OWNER = "weft-scripted-llm (test double)"

router = APIRouter(prefix="/v1")
log = logging.getLogger("weft_scripted_llm")
M = TypeVar("M", bound=BaseModel)


class BadRequestError(Exception):
    """The body is not JSON or not the expected shape."""


async def read_body(request: Request, model: type[M]) -> tuple[Any, M]:
    """The raw JSON body and its parsed form; BadRequestError when either fails."""
    try:
        raw = await request.json()
        return raw, model.model_validate(raw)
    except (ValueError, ValidationError) as exc:
        raise BadRequestError(str(exc)) from exc


def conversation_key(request: Request, raw: Any) -> str | None:
    """The `X-Scripted-LLM-Conversation` header, else the body's `user` field."""
    header = request.headers.get(CONVERSATION_HEADER)
    if header:
        return header
    user = raw.get("user") if isinstance(raw, dict) else None
    return user if isinstance(user, str) and user else None


@router.post("/chat/completions")
async def chat_completions(request: Request) -> Response:
    state = state_of(request)
    try:
        raw, chat = await read_body(request, ChatCompletionRequest)
    except BadRequestError as exc:
        state.requests.record(request.url.path, None)
        return error_response(400, f"scripted LLM: invalid request: {exc}")
    key = conversation_key(request, raw)
    entry = state.requests.record(
        request.url.path, raw, key, entered_at=getattr(request.state, "entered_at", None)
    )
    request.state.recorded = entry  # ExchangeClock stamps its sent_at
    try:
        reply = state.policy.reply(chat, key)
    except ScriptExhaustedError as exc:
        log.warning("%s", exc)
        entry.answered()
        return no_retry_error(500, str(exc), code="script_exhausted")
    log.info(
        "scripted LLM test double: chat completion policy=%s stream=%s finish=%s",
        state.policy.name,
        chat.stream,
        reply.final_finish_reason,
    )
    response = await respond(request, state, chat, reply)
    entry.answered()
    return response


@router.post("/embeddings")
async def embeddings(request: Request) -> Response:
    state = state_of(request)
    try:
        raw, parsed = await read_body(request, EmbeddingRequest)
    except BadRequestError as exc:
        return error_response(400, f"scripted LLM: invalid request: {exc}")
    entry = state.requests.record(request.url.path, raw)
    body = embeddings_body(
        parsed, state.settings.embedding_dimensions, parsed.model or TEST_DOUBLE_EMBEDDING_MODEL
    )
    entry.answered()
    return JSONResponse(body)


def model_entry(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": OWNER}


@router.get("/models")
async def models() -> dict[str, Any]:
    """The two fake models; any other model name is accepted too."""
    return {
        "object": "list",
        "data": [model_entry(TEST_DOUBLE_MODEL), model_entry(TEST_DOUBLE_EMBEDDING_MODEL)],
    }
