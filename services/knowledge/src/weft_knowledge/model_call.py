"""One instruction-and-text model call at ingestion (wiki pages, graph extraction): the
shared shape of knowledge's ``weft_llm`` requests, whose deltas nobody watches."""

from __future__ import annotations

from weft_llm import ChatMessage, ChatModel, LLMRequest, LLMResponse


class _DiscardDeltas:
    """A stream sink for a call whose answer is read whole."""

    async def on_reasoning(self, delta: str) -> None:
        """Not needed."""

    async def on_content(self, delta: str) -> None:
        """Not needed: the response carries the whole content."""


async def ask(
    chat: ChatModel,
    *,
    model: str,
    system: str,
    user: str,
    temperature: float,
    max_completion_tokens: int,
    stall_timeout_s: float,
) -> LLMResponse:
    """``user`` under ``system`` to ``model``; the whole answer (``LLMCallError`` when the
    call fails)."""
    messages: list[ChatMessage] = [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]
    request = LLMRequest(
        model=model, messages=messages, temperature=temperature,
        max_completion_tokens=max_completion_tokens, stall_timeout_s=stall_timeout_s,
    )  # fmt: skip
    return await chat.stream(request, _DiscardDeltas())
