"""ContextManager: the engine's side of history, compaction and long-term memory.

- History comes from memory under the agent's whole context window (SPEC M-08); the
  stored-turn id of each history message travels in ``TurnState.turn_ids`` so that a
  compaction can write its checkpoint on the right stored turn (M-07).
- Before every LLM call the messages are compacted when they exceed window - reserve
  (M-03..M-06) with ``weft_engine.compaction.Compactor``; a provider context overflow forces it
  (E-25). Success emits ``context_compacted``.
- Agents with memory enabled recall long-term facts at the start of a turn (M-10) and
  announce them with ``memory_recalled``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog
from weft_context import TokenEstimator
from weft_contracts import (
    AgentConfig,
    ContextCompactedEvent,
    MemoryRecalledData,
    MemoryRecalledEvent,
    RecalledMemory,
)
from weft_llm import ChatModel

from weft_engine.compaction import CompactionSettings, Compactor
from weft_engine.emitter import EventEmitter
from weft_engine.history_client import HistoryClient, MemoryUnavailable
from weft_engine.prompt import initial_messages
from weft_engine.state import TurnState
from weft_engine.vision import append_text

log = structlog.get_logger(__name__)


class HistoryUnavailable(Exception):
    """memory could not give the history."""


class ContextManager:
    """History in, compaction before each think, memories recalled."""

    def __init__(
        self,
        *,
        memory: HistoryClient,
        model: ChatModel,
        emitter: EventEmitter,
        estimator: TokenEstimator,
    ):
        self._memory = memory
        self._model = model
        self._emitter = emitter
        self._estimator = estimator

    async def opening(
        self, agent: AgentConfig, tenant_id: str, session_id: str, user_id: str, query: str,
        ids: dict[str, Any], images: Sequence[str] = (), *, previous: str | None = None,
    ) -> tuple[list[dict[str, Any]], list[str | None]]:  # fmt: skip
        """The first messages of a turn and their stored-turn ids. ``previous``: the
        session's last ended turn; memory answers once it has stored that turn's end."""
        try:
            history = await self._memory.history(
                tenant_id, session_id, token_budget=agent.context_window,
                retain_retrieval_history=agent.retain_retrieval_history, vision=agent.vision,
                after=previous,
            )  # fmt: skip
        except MemoryUnavailable as exc:
            raise HistoryUnavailable(str(exc)) from exc
        if history.previous_turn_stored is False:
            log.warning("history_misses_previous_turn", previous=previous, **ids)
        facts = await self._recall(agent, tenant_id, user_id, query, ids)
        base = initial_messages(agent, [], query, session_id, user_name=user_id, images=images)
        if facts:
            base[-1] = append_text(base[-1], facts)
        return history.with_prefix(base[:1], base[1:])

    async def _recall(
        self, agent: AgentConfig, tenant_id: str, user_id: str, query: str, ids: dict[str, Any]
    ) -> str:
        if not agent.memory_enabled:
            return ""  # SPEC M-10: a memory-disabled agent neither reads nor writes
        try:
            recalled = await self._memory.recall(tenant_id, user_id, query)
        except MemoryUnavailable:
            log.warning("memory_recall_unavailable", **ids)
            return ""
        if not recalled:
            return ""
        memories = [RecalledMemory(id=m.id, content=m.content, score=m.score) for m in recalled]
        await self._emitter.emit(MemoryRecalledEvent, ids, MemoryRecalledData(memories=memories))
        lines = "\n".join(f"- {m.content}" for m in memories)
        return f"<memories>What you know about the user:\n{lines}</memories>"

    async def fit(self, state: TurnState, *, force_reason: str | None = None) -> TurnState:
        """Compact the messages when over the threshold (or when forced)."""
        agent = state.agent
        settings = CompactionSettings(
            model=agent.model, context_window=agent.context_window,
            completion_budget=agent.max_completion_tokens, stall_timeout_s=agent.llm_call_timeout_s,
        )  # fmt: skip
        compactor = Compactor(self._model, settings, self._estimator)
        tokens = self._estimator.messages_tokens(state.messages)
        if force_reason is None and not compactor.needs_compaction(tokens):
            return state
        pad = [None] * (len(state.messages) - len(state.turn_ids))
        result = await compactor.compact(
            state.messages, [*state.turn_ids, *pad], tokens=tokens, force_reason=force_reason
        )
        await self._store_checkpoint(state, result)
        if not result.compacted:
            return state
        await self._emitter.emit(ContextCompactedEvent, state.ids(), result.event_data(state.round))
        return state.model_copy(update={"messages": result.messages, "turn_ids": result.turn_ids})

    async def _store_checkpoint(self, state: TurnState, result: Any) -> None:
        try:
            await self._memory.store_checkpoint(state.tenant_id, state.session_id, result)
        except MemoryUnavailable:
            log.warning("checkpoint_not_stored", request_id=state.request_id)

    async def aclose(self) -> None:
        """Close the memory client."""
        await self._memory.aclose()
