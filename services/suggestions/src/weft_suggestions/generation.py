"""The sources of follow-up questions (SPEC Q-01, Q-03): the agent's curated list, the
turn's knowledge sources, and a model that reads the last turns.

:class:`FollowUpGenerator` puts them together by mode: ``generated`` asks the model (and
falls back to knowledge when the call fails, ``knowledge_fallback``); ``hybrid`` asks the
model and lets knowledge, then the curated list, fill the quota; ``knowledge`` and
``curated`` use one source. The filters of :mod:`weft_suggestions.filters` apply last.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, assert_never

import structlog
from pydantic import ValidationError
from weft_contracts import SuggestedQuestion
from weft_llm import ChatMessage, ChatModel, LLMCallError, LLMRequest

from weft_suggestions.config import ALL_CATEGORIES, Category, FollowUpConfig
from weft_suggestions.filters import keep

log = structlog.get_logger(__name__)

MAX_EXCHANGE_CHARS = 6_000
"""Each past question and answer is cut to this many characters in the prompt."""

PROMPT = (
    "You suggest follow-up questions a user may click after an assistant's answer. "
    "Write at most {count} short questions (under 120 characters each), in the language "
    "of the conversation, that the user would plausibly ask next, of these categories: "
    "{categories}. Never repeat the user's last question. Answer only with a JSON array "
    'like [{{"text": "...", "category": "{example}"}}].'
)

CATEGORY_MEANING: dict[Category, str] = {
    "clarify": "clarify (make part of the answer clearer)",
    "deepen": "deepen (go further on the topic)",
    "action": "action (what to do next)",
}


class GenerationFailed(Exception):
    """The model could not be asked or answered something that is not a list of questions."""


@dataclass(frozen=True, kw_only=True)
class Exchange:
    """One past turn: the user's question and the answer it got."""

    question: str
    answer: str


@dataclass(frozen=True, kw_only=True)
class FollowUpRequest:
    """Everything one follow-up set is made from."""

    exchanges: Sequence[Exchange]
    """The last turns, oldest first; the last one is the turn the set follows."""
    references: Sequence[dict[str, Any]]
    """The sources of that turn (``references`` events: title, document, chunk, KB)."""
    config: FollowUpConfig
    locale: str | None = None
    """The user's language when the request named one: the questions are written in it."""


class FollowUpGenerator:
    """Makes the candidate questions of one set."""

    def __init__(self, model: ChatModel, default_model: str, *, stall_timeout_s: float = 30.0):
        self._model = model
        self._default_model = default_model
        self._stall_timeout_s = stall_timeout_s

    async def questions(self, request: FollowUpRequest) -> list[SuggestedQuestion]:
        """The set's questions, filtered and cut to the configured count. Raises
        :class:`GenerationFailed` when the model was needed, failed, and nothing may
        replace it."""
        config = request.config
        match config.mode:
            case "curated":
                candidates = curated(config)
            case "knowledge":
                candidates = knowledge(request.references)
            case "generated":
                candidates = await self._generated_or_knowledge(request)
            case "hybrid":
                candidates = [
                    *await self._generated_or_knowledge(request),
                    *knowledge(request.references),
                    *curated(config),
                ]
            case _:
                assert_never(config.mode)
        user_question = request.exchanges[-1].question if request.exchanges else ""
        return keep(candidates, user_question=user_question, count=config.count)

    async def _generated_or_knowledge(self, request: FollowUpRequest) -> list[SuggestedQuestion]:
        try:
            return await self.generated(request)
        except GenerationFailed as exc:
            if not request.config.knowledge_fallback:
                raise
            log.warning("follow_up_generation_failed_using_knowledge", error=str(exc))
            return knowledge(request.references)

    async def generated(self, request: FollowUpRequest) -> list[SuggestedQuestion]:
        """The model's questions for the last exchanges (SPEC Q-02 options)."""
        config = request.config
        llm_request = LLMRequest(
            model=config.model_id or self._default_model,
            messages=prompt_messages(request),
            temperature=0.7,
            max_completion_tokens=512,
            stall_timeout_s=self._stall_timeout_s,
        )
        try:
            response = await self._model.stream(llm_request, _Ignore())
        except LLMCallError as exc:
            raise GenerationFailed(f"model call failed: {exc}") from exc
        return parse_questions(response.content, config.categories)


def prompt_messages(request: FollowUpRequest) -> list[ChatMessage]:
    """The system instruction, then the last ``max_context_turns`` exchanges as turns."""
    config = request.config
    system = PROMPT.format(
        count=config.count,
        categories="; ".join(CATEGORY_MEANING[c] for c in config.categories),
        example=config.categories[0],
    )
    if request.locale is not None:
        system += f" Write the questions in the language of the locale {request.locale}."
    if config.additional_instruction:
        system += "\n\nAdditional instruction from the agent's author:\n"
        system += config.additional_instruction
    messages: list[ChatMessage] = [{"role": "system", "content": system}]
    for exchange in request.exchanges[-config.max_context_turns :]:
        messages.append({"role": "user", "content": exchange.question[:MAX_EXCHANGE_CHARS]})
        messages.append({"role": "assistant", "content": exchange.answer[:MAX_EXCHANGE_CHARS]})
    messages.append({"role": "user", "content": "Suggest the follow-up questions now."})
    return messages


def parse_questions(content: str, categories: Sequence[Category]) -> list[SuggestedQuestion]:
    """The questions of the model's JSON array (an object per question, or plain strings);
    text around the array (a code fence, a sentence) is ignored."""
    start, end = content.find("["), content.rfind("]")
    if start < 0 or end < start:
        raise GenerationFailed("the model's answer has no JSON array")
    try:
        items = json.loads(content[start : end + 1])
    except ValueError as exc:
        raise GenerationFailed(f"the model's array is not JSON: {exc}") from exc
    if not isinstance(items, list):
        raise GenerationFailed("the model's answer is not an array")
    found: list[SuggestedQuestion] = []
    for item in items:
        text, category = _text_and_category(item)
        if not text or (category is not None and category not in categories):
            continue
        try:
            found.append(
                SuggestedQuestion(
                    id=f"g{len(found)}", text=text[:500], source="generated", category=category
                )
            )
        except ValidationError:
            continue  # one unusable item does not cost the others
    return found


def _text_and_category(item: object) -> tuple[str, Category | None]:
    if isinstance(item, str):
        return item.strip(), None
    if not isinstance(item, dict) or not isinstance(item.get("text"), str):
        return "", None
    raw = item.get("category")
    category = next((c for c in ALL_CATEGORIES if c == raw), None)
    return item["text"].strip(), category


def knowledge(references: Sequence[dict[str, Any]]) -> list[SuggestedQuestion]:
    """One question per distinct source document of the turn, naming the chunk to retrieve
    when clicked (SPEC Q-03)."""
    found: list[SuggestedQuestion] = []
    documents: set[str] = set()
    for ref in references:
        title = str(ref.get("title") or "").strip()
        document_id = str(ref.get("document_id") or "")
        if not title or not document_id or document_id in documents:
            continue
        documents.add(document_id)
        found.append(
            SuggestedQuestion(
                id=f"k{len(found)}",
                text=f"What else does “{title[:200]}” say about this?",
                source="knowledge",
                document_id=document_id,
                chunk_id=str(ref.get("chunk_id") or "") or None,
                knowledge_base_id=str(ref.get("knowledge_base_id") or "") or None,
            )
        )
    return found


def curated(config: FollowUpConfig) -> list[SuggestedQuestion]:
    """The author's questions, as entered."""
    return [
        SuggestedQuestion(id=f"c{i}", text=text, source="curated")
        for i, text in enumerate(config.curated)
        if text.strip()
    ]


class _Ignore:
    async def on_reasoning(self, delta: str) -> None:
        """Not needed."""

    async def on_content(self, delta: str) -> None:
        """Not needed: the response carries the whole content."""
