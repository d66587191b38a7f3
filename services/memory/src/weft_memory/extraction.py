"""Memory extraction after a completed turn (SPEC M-10): one LLM call through the same
client as the engine (``weft_llm``) turns the exchange into durable facts about the caller."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_llm import ChatMessage, ChatModel, LLMCallError, LLMRequest
from weft_storage.memory.models import Message

from weft_memory.longterm import LongTermMemory, parse_facts

EXTRACTION_PROMPT = (
    "You maintain a long-term memory about a user of an AI assistant. From the exchange "
    "below, extract durable facts about the user worth remembering in future "
    "conversations: preferences, identity, projects, constraints, decisions. Skip "
    "small talk, questions, one-off requests and anything about the assistant. Answer with "
    'a JSON array of short self-contained sentences (e.g. ["The user prefers Python."]), '
    "or [] when there is nothing to remember."
)
MAX_EXCHANGE_CHARS = 12_000


class ExtractionFailed(Exception):
    """The extraction model could not be asked (reported; the turn itself is unaffected)."""


class _Ignore:
    async def on_reasoning(self, delta: str) -> None:
        """Not needed."""

    async def on_content(self, delta: str) -> None:
        """Not needed: the response carries the whole content."""


@dataclass(frozen=True, kw_only=True)
class ExtractionResult:
    """Facts stored for one turn."""

    memory_ids: list[str]
    facts: list[str]


class MemoryExtractor:
    """Extracts and stores facts of one completed turn."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        model: ChatModel,
        model_name: str,
        memory: LongTermMemory,
        stall_timeout_s: float = 60.0,
    ):
        self._sessions = sessions
        self._model = model
        self._model_name = model_name
        self._memory = memory
        self._stall_timeout_s = stall_timeout_s

    async def extract_turn(
        self, tenant_id: str, user_id: str, session_id: str, request_id: str
    ) -> ExtractionResult | None:
        """Extract and store the facts of turn ``request_id``; ``None`` when the turn is not
        stored and completed. Raises :class:`ExtractionFailed` when the model call fails."""
        facts = await self.facts(tenant_id, session_id, request_id)
        if facts is None:
            return None
        ids = await self._memory.remember(
            tenant_id, user_id, facts, session_id=session_id, request_id=request_id
        )
        return ExtractionResult(memory_ids=ids, facts=facts)

    async def facts(self, tenant_id: str, session_id: str, request_id: str) -> list[str] | None:
        """What the model finds worth remembering in turn ``request_id`` (nothing stored);
        ``None`` when the turn is not stored and completed."""
        exchange = await self._exchange(tenant_id, session_id, request_id)
        if exchange is None:
            return None
        messages: list[ChatMessage] = [
            {"role": "system", "content": EXTRACTION_PROMPT},
            {"role": "user", "content": exchange[:MAX_EXCHANGE_CHARS]},
        ]
        request = LLMRequest(
            model=self._model_name,
            messages=messages,
            temperature=0.0,
            max_completion_tokens=1024,
            stall_timeout_s=self._stall_timeout_s,
        )
        try:
            response = await self._model.stream(request, _Ignore())
        except LLMCallError as exc:
            raise ExtractionFailed(f"extraction model call failed: {exc}") from exc
        return parse_facts(response.content)

    async def _exchange(self, tenant_id: str, session_id: str, request_id: str) -> str | None:
        stmt = select(Message).where(
            Message.tenant_id == tenant_id,
            Message.session_id == session_id,
            Message.request_id == request_id,
        )
        async with self._sessions() as s:
            rows = {m.role: m for m in (await s.scalars(stmt)).all()}
        user, assistant = rows.get("user"), rows.get("assistant")
        if user is None or assistant is None or not assistant.is_completed:
            return None
        return f"User: {user.content}\n\nAssistant: {assistant.content}"
