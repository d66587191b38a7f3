"""What a policy needs to know about the conversation in a request."""

from __future__ import annotations

import re

from weft_scripted_llm.openai_schema import ChatCompletionRequest, ChatMessage


def last_user_index(request: ChatCompletionRequest) -> int | None:
    """Index of the last `user` message, None when there is none."""
    for index in range(len(request.messages) - 1, -1, -1):
        if request.messages[index].role == "user":
            return index
    return None


_RUNTIME_CONTEXT = re.compile(r"<runtime_context>.*?</runtime_context>", re.DOTALL)


def last_user_text(request: ChatCompletionRequest) -> str:
    """Text of the last `user` message ('' when there is none), without the per-turn
    ``<runtime_context>`` block the engine appends (SPEC E-24): that is not the question."""
    index = last_user_index(request)
    text = "" if index is None else request.messages[index].text()
    return _RUNTIME_CONTEXT.sub("", text).strip()


def tool_messages_after_last_user(request: ChatCompletionRequest) -> list[ChatMessage]:
    """The `tool` messages that follow the last user message (the pending tool results)."""
    index = last_user_index(request)
    start = 0 if index is None else index + 1
    return [m for m in request.messages[start:] if m.role == "tool"]


_QUESTION_TAG = re.compile(r"<question>(.*?)</question>", re.DOTALL)


def question_to_rewrite(request: ChatCompletionRequest) -> str | None:
    """The question of a query-rewrite request (the engine's quick-answer rewrite sends the
    conversation, then ``<question>...</question>``, SPEC C-04); None for other requests."""
    found = _QUESTION_TAG.search(last_user_text(request))
    return found.group(1).strip() if found else None


def asks_for_summary(request: ChatCompletionRequest) -> bool:
    """Whether a system message or the last user message asks for a summary."""
    texts = [m.text() for m in request.messages if m.role in ("system", "developer")]
    texts.append(last_user_text(request))
    return any("summar" in t.lower() for t in texts)
