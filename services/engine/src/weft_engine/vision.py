"""Vision routing (SPEC E-26): how the images of the user's message reach the model.

- The chat model reads images (``AgentConfig.vision``): the current user message is sent
  in OpenAI multimodal form, a text part then one ``image_url`` part per image. It stays
  in the turn's messages, so later rounds and the max-iterations synthesis see it too.
- It does not, and the agent has a VLM (``vlm_model``): the VLM describes each image and
  the descriptions are appended to the query inside ``<image_descriptions>``. The call
  runs in the turn's first step, never on the Kafka consume path (invariant 4).
- No VLM, or the VLM failed for an image: the query says plainly that the image could
  not be read, and the turn goes on.

``images_described`` tells clients and memory what the query got; memory stores it with
the user message so that reloaded history does not call the VLM again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal

import structlog
from weft_context.images import content_text, descriptions_block, multimodal_content
from weft_contracts import AgentConfig, ImagesDescribedData, ImagesDescribedEvent
from weft_llm import ChatModel, LLMCallError, LLMRequest, TransientLLMError, UserMessage

from weft_engine.emitter import EventEmitter
from weft_engine.state import TurnState

log = structlog.get_logger(__name__)

__all__ = [
    "ImageDescriber", "ImageRoute", "append_text", "content_text", "descriptions_block",
    "multimodal_content", "route_images", "unread_note",
]  # fmt: skip

ImageRoute = Literal["none", "direct", "describe", "unreadable"]
"""No images; image parts to the chat model; VLM descriptions; a note that they are unread."""

DESCRIBE_PROMPT = (
    "Describe this image for an assistant that cannot see it: what it shows, any text in "
    "it (verbatim), numbers, charts or tables. Be factual and concise."
)
NO_VLM_NOTE = (
    "Note: the user attached {count} image(s) that could not be read: this agent has no "
    "image-description model. Say so if the answer depends on them."
)
FAILED_NOTE = (
    "Note: {count} of the attached image(s) could not be read (the image-description "
    "model failed). Say so if the answer depends on them."
)
VLM_MAX_TOKENS = 1024


def route_images(agent: AgentConfig, images: Sequence[str]) -> ImageRoute:
    """The way this turn's images go to the model (SPEC E-26)."""
    if not images:
        return "none"
    if agent.vision:
        return "direct"
    return "describe" if agent.vlm_model else "unreadable"


def unread_note(descriptions: Sequence[str], *, has_vlm: bool) -> str:
    """The note for images the model will not know about; empty when all were read."""
    unread = sum(1 for text in descriptions if not text.strip())
    if not unread:
        return ""
    return (FAILED_NOTE if has_vlm else NO_VLM_NOTE).format(count=unread)


def append_text(message: UserMessage, text: str) -> UserMessage:
    """``message`` with ``text`` added after its text (plain or multimodal content)."""
    content = message["content"]
    if isinstance(content, list):
        return {"role": "user", "content": [*content, {"type": "text", "text": text}]}
    return {"role": "user", "content": f"{content}\n\n{text}"}


class _Discard:
    """A stream sink for a call whose deltas nobody watches (the VLM's, the quick-answer
    query rewrite's): its text is read whole from the response."""

    async def on_reasoning(self, delta: str) -> None:
        """Ignored."""

    async def on_content(self, delta: str) -> None:
        """Ignored."""


discard = _Discard()


class ImageDescriber:
    """Describes a turn's images with its agent's VLM and puts the result in the query.

    A transient VLM failure (429, 5xx, timeout) is retried after each pause of
    ``retry_backoff_s``; any other failure leaves that image unread at once.
    """

    def __init__(
        self, model: ChatModel, emitter: EventEmitter, retry_backoff_s: Sequence[float] = (1.0,)
    ):
        self._model = model
        self._emitter = emitter
        self._retry_backoff_s = tuple(retry_backoff_s)

    async def describe(self, agent: AgentConfig, images: Sequence[str]) -> list[str]:
        """One description per image, concurrently; empty for an image the VLM failed."""
        assert agent.vlm_model is not None
        return list(await asyncio.gather(*(self._one(agent, url) for url in images)))

    async def _one(self, agent: AgentConfig, url: str) -> str:
        assert agent.vlm_model is not None
        ask: UserMessage = {"role": "user", "content": multimodal_content(DESCRIBE_PROMPT, [url])}
        request = LLMRequest(
            model=agent.vlm_model,
            messages=[ask],
            temperature=0.0,
            max_completion_tokens=VLM_MAX_TOKENS,
            stall_timeout_s=agent.llm_call_timeout_s,
        )
        for pause in (*self._retry_backoff_s, None):
            try:
                response = await self._model.stream(request, discard)
                return response.content.strip()
            except LLMCallError as exc:  # final but reported: the turn goes on (STYLE 4)
                log.warning("image_description_failed", model=agent.vlm_model, error=str(exc))
                if not isinstance(exc, TransientLLMError) or pause is None:
                    return ""
            await asyncio.sleep(pause)  # cancellable: a stop ends the wait at once
        return ""

    async def read_pending(self, state: TurnState) -> TurnState:
        """Put ``state.images_to_describe`` into the current user message as text (the
        last message: nothing else joined the turn before its first think): the VLM's
        descriptions, or the note that they could not be read when there is no VLM."""
        images = state.images_to_describe
        if not images:
            return state
        vlm = state.agent.vlm_model
        descriptions = await self.describe(state.agent, images) if vlm else [""] * len(images)
        note = unread_note(descriptions, has_vlm=vlm is not None)
        last = state.messages[-1]
        if last["role"] != "user":
            raise ValueError(f"images to describe, but the last message is {last['role']}'s")
        user = append_text(last, descriptions_block(descriptions, note))
        await self.announce(state.ids(), vlm, descriptions, note)
        return state.model_copy(
            update={"messages": [*state.messages[:-1], user], "images_to_describe": []}
        )

    async def announce(
        self, ids: dict[str, Any], model: str | None, descriptions: list[str], note: str
    ) -> None:
        """``images_described``: what the query got in place of the images."""
        data = ImagesDescribedData(model=model, descriptions=descriptions, note=note)
        await self._emitter.emit(ImagesDescribedEvent, ids, data)
