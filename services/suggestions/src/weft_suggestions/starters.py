"""Starter questions of an empty session (SPEC Q-01 placement ``starter``).

A starter set depends on the agent only (its settings, name, description and the titles of
its knowledge), not on a conversation, so one set per agent serves every empty session and
is cached like follow-ups (Q-04): keyed ``agent:<id>`` with placement ``starter`` and the
hash of everything it is made from, generated under the same lease by one replica. The
first caller waits for the generation (a curated or knowledge set needs no model); a
caller arriving while another replica generates gets ``generating`` and asks again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import assert_never

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import AgentSuggestionSettings, StarterConfig, SuggestedQuestion
from weft_llm import ChatMessage, ChatModel, LLMCallError, LLMRequest
from weft_storage.suggestions.models import MessageSuggestionSet

from weft_suggestions.config import ALL_CATEGORIES, AgentSettings
from weft_suggestions.filters import keep
from weft_suggestions.generation import GenerationFailed, parse_questions
from weft_suggestions.lease import FinalState, SetKey, SuggestionLease

STARTER = "starter"

PROMPT = (
    "You write the first questions a user may click to start a conversation with an "
    "assistant. The assistant is {name!r}: {description}. Write at most {count} short, "
    "varied questions (under 120 characters each) a new user would ask it. Answer only "
    'with a JSON array like [{{"text": "..."}}].'
)


@dataclass(frozen=True, kw_only=True)
class StarterSet:
    """The starters of an agent as the API answers them."""

    agent_id: str
    locale: str
    state: str
    questions: list[SuggestedQuestion]
    reason: str = ""


def starters_hash(agent: AgentSuggestionSettings) -> str:
    """SHA-256 of what a starter set is made from: a changed setting, name, description
    or knowledge title gets a new set."""
    source = agent.model_dump(mode="json", exclude={"settings": {"follow_ups"}})
    return hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()


class StarterSets:
    """Reads, claims and generates the starter set of an agent."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        lease: SuggestionLease,
        configs: AgentSettings,
        model: ChatModel,
        default_model: str,
        locale: str,
        stall_timeout_s: float = 30.0,
    ):
        self._sessions = sessions
        self._lease = lease
        self._configs = configs
        self._model = model
        self._default_model = default_model
        self._locale = locale
        self._stall_timeout_s = stall_timeout_s

    async def starters(
        self, tenant_id: str, session_id: str, agent_id: str, locale: str | None = None
    ) -> StarterSet:
        """The agent's starters in ``locale`` (None: the service's default; ``disabled``
        when the agent has them off); raises ``UnknownAgent`` for an agent the tenant does
        not have."""
        agent = await self._configs.agent(tenant_id, agent_id)
        config = agent.settings.starters
        locale = locale or self._locale
        if not config.enabled:
            return StarterSet(agent_id=agent_id, locale=locale, state="disabled", questions=[])
        key = SetKey(
            tenant_id=tenant_id,
            assistant_message_id=f"agent:{agent_id}"[:128],
            placement=STARTER,
            config_hash=starters_hash(agent),
            locale=locale,
        )
        row = await self._row(key)
        if row is not None and row.state in ("ready", "suppressed"):
            return _out(agent_id, locale, row.state, row.questions, row.reason)
        claim = await self._lease.claim(
            key,
            session_id=session_id,
            request_id="",
            config=config,
            regenerate=row is not None and row.state == "failed",
        )
        if claim is None:
            return _out(agent_id, locale, "generating", [], "")
        state, questions, reason = await self._generate(agent, config, locale)
        dumped = [q.model_dump(mode="json") for q in questions]
        await self._lease.finish(claim, state, dumped, reason)
        return _out(agent_id, locale, state, dumped, reason)

    async def _generate(
        self, agent: AgentSuggestionSettings, config: StarterConfig, locale: str
    ) -> tuple[FinalState, list[SuggestedQuestion], str]:
        try:
            candidates = await self._candidates(agent, config, locale)
        except GenerationFailed as exc:
            return "failed", [], str(exc)[:200]
        kept = keep(candidates, user_question="", count=config.count)
        if not kept:
            return "suppressed", [], "no_question_left"
        return "ready", kept, ""

    async def _candidates(
        self, agent: AgentSuggestionSettings, config: StarterConfig, locale: str
    ) -> list[SuggestedQuestion]:
        match config.mode:
            case "curated":
                return curated_starters(config)
            case "knowledge":
                return knowledge_starters(agent)
            case "generated":
                return await self._generated_or_knowledge(agent, config, locale)
            case "hybrid":
                return [
                    *await self._generated_or_knowledge(agent, config, locale),
                    *knowledge_starters(agent),
                    *curated_starters(config),
                ]
            case _:
                assert_never(config.mode)

    async def _generated_or_knowledge(
        self, agent: AgentSuggestionSettings, config: StarterConfig, locale: str
    ) -> list[SuggestedQuestion]:
        try:
            return await self._generated(agent, config, locale)
        except GenerationFailed:
            if config.mode == "generated" and not agent.knowledge_titles:
                raise
            return knowledge_starters(agent)

    async def _generated(
        self, agent: AgentSuggestionSettings, config: StarterConfig, locale: str
    ) -> list[SuggestedQuestion]:
        system = PROMPT.format(
            name=agent.name or agent.agent_id,
            description=agent.description or "a general assistant",
            count=config.count,
        )
        system += f" Write them in the language of the locale {locale}."
        if config.additional_instruction:
            system += "\n\nAdditional instruction from the agent's author:\n"
            system += config.additional_instruction
        messages: list[ChatMessage] = [
            {"role": "system", "content": system},
            {"role": "user", "content": "Suggest the starter questions now."},
        ]
        request = LLMRequest(
            model=config.model_id or self._default_model,
            messages=messages,
            temperature=0.7,
            max_completion_tokens=512,
            stall_timeout_s=self._stall_timeout_s,
        )
        try:
            response = await self._model.stream(request, _Ignore())
        except LLMCallError as exc:
            raise GenerationFailed(f"model call failed: {exc}") from exc
        return parse_questions(response.content, ALL_CATEGORIES)

    async def _row(self, key: SetKey) -> MessageSuggestionSet | None:
        async with self._sessions() as s:
            return await s.get(
                MessageSuggestionSet,
                (
                    key.tenant_id,
                    key.assistant_message_id,
                    key.placement,
                    key.config_hash,
                    key.locale,
                ),
            )


def _out(
    agent_id: str, locale: str, state: str, questions: list[dict[str, object]], reason: str
) -> StarterSet:
    return StarterSet(
        agent_id=agent_id,
        locale=locale,
        state=state,
        questions=[SuggestedQuestion.model_validate(q) for q in questions],
        reason=reason,
    )


def curated_starters(config: StarterConfig) -> list[SuggestedQuestion]:
    """The author's starters, as entered."""
    return [
        SuggestedQuestion(id=f"c{i}", text=text, source="curated")
        for i, text in enumerate(config.curated)
        if text.strip()
    ]


def knowledge_starters(agent: AgentSuggestionSettings) -> list[SuggestedQuestion]:
    """One starter per document of the agent's knowledge, naming it so that a click
    retrieves it first (SPEC Q-03)."""
    return [
        SuggestedQuestion(
            id=f"k{i}",
            text=f"What does “{doc.title[:200]}” cover?",
            source="knowledge",
            document_id=doc.document_id,
            chunk_id=doc.chunk_id,
            knowledge_base_id=doc.knowledge_base_id,
        )
        for i, doc in enumerate(agent.knowledge_titles)
    ]


class _Ignore:
    async def on_reasoning(self, delta: str) -> None:
        """Not needed."""

    async def on_content(self, delta: str) -> None:
        """Not needed: the response carries the whole content."""
