"""ContextManager: the engine's side of history, compaction and long-term memory.

- History comes from memory under the agent's whole context window (SPEC M-08); the
  stored-turn id of each history message travels in ``TurnState.turn_ids`` so that a
  compaction can write its checkpoint on the right stored turn (M-07).
- Before every LLM call the messages are compacted when they exceed window - reserve
  (M-03..M-06) with ``weft_engine.compaction.Compactor``; a provider context overflow forces it
  (E-25). Success emits ``context_compacted``.
- The count that decides compaction is the provider's usage of the turn's last request
  plus BPE of the messages added since (M-01); the BPE count of text is calibrated by a
  per-session scale measured between two requests of one turn (M-02), read with the
  history and written back at the turn's end when a new one was measured.
- Agents with memory enabled recall long-term facts at the start of a turn (M-10) and
  announce them with ``memory_recalled``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, NamedTuple

import structlog
from weft_context import TokenEstimator
from weft_context.tokens import CalibrationSample, UsageBaseline, clamp_scale, measure_scale
from weft_contracts import (
    AgentConfig,
    ContextCompactedEvent,
    MemoryRecalledData,
    MemoryRecalledEvent,
    RecalledMemory,
)
from weft_llm import ChatMessage, ChatModel, Usage

from weft_engine.compaction import CompactionSettings, Compactor
from weft_engine.emitter import EventEmitter
from weft_engine.history_client import HistoryClient, MemoryUnavailable
from weft_engine.prompt import system_message, user_message
from weft_engine.state import TurnState, UsageMark
from weft_engine.token_cache import with_scale
from weft_engine.vision import append_text

log = structlog.get_logger(__name__)


class HistoryUnavailable(Exception):
    """memory could not give the history."""


class Opening(NamedTuple):
    """The first messages of a turn, their stored-turn ids and the session's scale."""

    messages: list[ChatMessage]
    turn_ids: list[str | None]
    token_scale: float


def usage_tokens(
    estimator: TokenEstimator, messages: Sequence[ChatMessage], usage: UsageMark | None
) -> int:
    """Tokens of ``messages`` (SPEC M-01): the provider's count of the last request plus
    BPE of what was added since; the estimate alone without usage. The completion that
    followed the request is in ``total_tokens``, so it counts from there when it is the
    next message (an assistant one); else only the prompt does."""
    if usage is None or usage.request_messages > len(messages):
        return estimator.messages_tokens(messages)
    n = usage.request_messages
    if n < len(messages) and messages[n]["role"] == "assistant":
        return estimator.current_tokens(
            messages, UsageBaseline(total_tokens=usage.total_tokens, message_count=n + 1)
        )
    return estimator.current_tokens(
        messages, UsageBaseline(total_tokens=usage.prompt_tokens, message_count=n)
    )


def system_key(messages: Sequence[ChatMessage]) -> str:
    """Digest of the system message (empty when the first message is not one)."""
    if not messages or messages[0]["role"] != "system":
        return ""
    raw = json.dumps(messages[0]["content"], sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def observe_usage(estimator: TokenEstimator, state: TurnState, usage: Usage | None) -> TurnState:
    """Record the usage of the request ``state.messages`` was just sent as (SPEC M-01) and,
    against the turn's previous request, measure the scale (SPEC M-02). The previous mark
    is None after a compaction (and tool truncation only happens within one), so those
    requests are never compared."""
    if usage is None or usage.prompt_tokens <= 0:
        return state
    key = system_key(state.messages)
    total = usage.total_tokens or usage.prompt_tokens + usage.completion_tokens
    mark = UsageMark(
        prompt_tokens=usage.prompt_tokens, total_tokens=total,
        request_messages=len(state.messages), system_key=key,
    )  # fmt: skip
    update: dict[str, Any] = {"usage": mark}
    last = state.usage
    if last is not None and last.request_messages <= len(state.messages):
        sample = CalibrationSample(
            previous_prompt_tokens=last.prompt_tokens,
            current_prompt_tokens=usage.prompt_tokens,
            added_messages=state.messages[last.request_messages :],
            same_tools_and_system=last.system_key == key,
        )
        scale = measure_scale(estimator, sample)
        if scale is not None:
            update |= {"token_scale": scale, "scale_measured": True}
    return state.model_copy(update=update)


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
    ) -> Opening:  # fmt: skip
        """The first messages of a turn, their stored-turn ids and the session's token
        scale (SPEC M-02; 1.0 before one was measured). ``previous``: the session's last
        ended turn; memory answers once it has stored that turn's end."""
        try:
            history = await self._memory.history(
                tenant_id, session_id, token_budget=agent.context_window,
                retain_retrieval_history=agent.retain_retrieval_history, vision=agent.vision,
                after=previous, credential=ids.get("credential"),
            )  # fmt: skip
        except MemoryUnavailable as exc:
            raise HistoryUnavailable(str(exc)) from exc
        if history.previous_turn_stored is False:
            log.warning("history_misses_previous_turn", previous=previous, **_loggable(ids))
        facts = await self._recall(agent, tenant_id, user_id, query, ids)
        system = system_message(agent, query, user_name=user_id)
        user = user_message(agent, query, session_id, images=images)
        if facts:
            user = append_text(user, facts)
        messages, turn_ids = history.with_prefix([system], [user])
        scale = 1.0 if history.token_scale is None else clamp_scale(history.token_scale)
        return Opening(messages, turn_ids, scale)

    async def _recall(
        self, agent: AgentConfig, tenant_id: str, user_id: str, query: str, ids: dict[str, Any]
    ) -> str:
        if not agent.memory_enabled:
            return ""  # SPEC M-10: a memory-disabled agent neither reads nor writes
        try:
            recalled = await self._memory.recall(
                tenant_id, user_id, query, credential=ids.get("credential")
            )
        except MemoryUnavailable:
            log.warning("memory_recall_unavailable", **_loggable(ids))
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
        estimator = self.estimator(state)
        compactor = Compactor(self._model, settings, estimator)
        tokens = usage_tokens(estimator, state.messages, state.usage)
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
        # SPEC M-06: the provider's count no longer describes these messages
        update = {"messages": result.messages, "turn_ids": result.turn_ids, "usage": None}
        return state.model_copy(update=update)

    def estimator(self, state: TurnState) -> TokenEstimator:
        """The engine's estimator with the turn's calibration scale."""
        return with_scale(self._estimator, state.token_scale)

    def observe(self, state: TurnState, usage: Usage | None) -> TurnState:
        """:func:`observe_usage` with the turn's estimator."""
        return observe_usage(self.estimator(state), state, usage)

    async def persist_scale(self, state: TurnState) -> None:
        """Store a scale measured this turn (SPEC M-02) on the newest stored turn of the
        history it was loaded with, the message memory reads the session's scale from; on
        the first turn of a session, on this turn's own assistant message (memory may not
        have recorded it yet: then it is logged and the next turn measures again)."""
        if not state.scale_measured:
            return
        anchor = next((t for t in reversed(state.turn_ids) if t), state.request_id)
        try:
            stored = await self._memory.store_token_scale(
                state.tenant_id,
                state.session_id,
                anchor,
                state.token_scale,
                credential=state.credential,
            )
        except MemoryUnavailable:
            stored = False
        if not stored:
            log.warning("token_scale_not_stored", request_id=state.request_id, anchor=anchor)

    async def _store_checkpoint(self, state: TurnState, result: Any) -> None:
        try:
            await self._memory.store_checkpoint(
                state.tenant_id, state.session_id, result, credential=state.credential
            )
        except MemoryUnavailable:
            log.warning("checkpoint_not_stored", request_id=state.request_id)

    async def aclose(self) -> None:
        """Close the memory client."""
        await self._memory.aclose()


def _loggable(ids: dict[str, Any]) -> dict[str, Any]:
    """The turn's ids without its credential (a bearer token never goes to the logs)."""
    return {k: v for k, v in ids.items() if k != "credential"}
