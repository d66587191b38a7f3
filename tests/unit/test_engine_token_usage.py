"""The engine's token count from provider usage (SPEC M-01) and its calibration scale
(SPEC M-02): ``weft_engine.context``."""

from __future__ import annotations

import time
from typing import Any, cast

from weft_context.tokens import TokenEstimator
from weft_contracts import AgentConfig
from weft_engine.context import ContextManager, observe_usage, system_key, usage_tokens
from weft_engine.emitter import EventEmitter
from weft_engine.history_client import HistoryClient
from weft_engine.state import TurnState, UsageMark
from weft_engine.token_cache import CachedTokenEstimator, with_scale
from weft_llm import ChatMessage, SystemMessage, ToolCall, Usage, UserMessage
from weft_testkit.function_model import FunctionModel, ModelCall, Reply, answer

EST = TokenEstimator()
SYSTEM: SystemMessage = {"role": "system", "content": "You are helpful."}
TEXT = "The quarterly report lists revenue by region and product line. " * 40


def _state(messages: list[ChatMessage], **kw: Any) -> TurnState:
    agent = AgentConfig(agent_id="a", model="m", context_window=40_000, max_completion_tokens=1000)
    return TurnState(
        tenant_id="t", session_id="s", request_id="r", user_id="u", agent=agent,
        messages=messages, started_at=time.time(), **kw,
    )  # fmt: skip


def _mark(prompt: int, messages: list[ChatMessage], total: int | None = None) -> UsageMark:
    return UsageMark(
        prompt_tokens=prompt, total_tokens=total or prompt, request_messages=len(messages),
        system_key=system_key(messages),
    )  # fmt: skip


def _round(text: str = TEXT) -> list[ChatMessage]:
    call: ToolCall = {
        "id": "c1",
        "type": "function",
        "function": {"name": "read", "arguments": "{}"},
    }
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": text},
    ]


def _raw(messages: list[ChatMessage]) -> int:
    """What the provider would report for ``messages`` with a scale of 1, per-message
    overhead excluded (measure_scale subtracts it)."""
    return EST.messages_tokens(messages) - 3 - 3 * len(messages)


# -- SPEC M-01: usage + BPE increment ---------------------------------------------------


def test_usage_total_then_bpe_of_messages_added_after_the_completion() -> None:
    # SPEC M-01
    sent: list[ChatMessage] = [SYSTEM, {"role": "user", "content": "read it"}]
    later = [*sent, *_round()]
    tool_result = later[-1]
    # the assistant tool call is the completion, counted in total_tokens
    assert usage_tokens(EST, later, _mark(5000, sent, total=5040)) == (
        5040 + EST.message_tokens(tool_result)
    )
    # nothing added yet (the completion not kept): the provider's prompt alone
    assert usage_tokens(EST, sent, _mark(5000, sent, total=5040)) == 5000


def test_a_nudge_after_the_request_counts_from_the_prompt() -> None:
    # SPEC M-01: the empty answer was not kept, so only the prompt describes the messages
    sent: list[ChatMessage] = [SYSTEM, {"role": "user", "content": "hi"}]
    nudge: UserMessage = {"role": "user", "content": "Please answer."}
    assert usage_tokens(EST, [*sent, nudge], _mark(900, sent, total=905)) == (
        900 + EST.message_tokens(nudge)
    )


def test_without_usage_or_after_messages_were_removed_the_estimate_is_used() -> None:
    # SPEC M-01: first request of a turn, or a history shorter than the request (shed)
    sent: list[ChatMessage] = [SYSTEM, {"role": "user", "content": "hi"}, *_round()]
    assert usage_tokens(EST, sent, None) == EST.messages_tokens(sent)
    assert usage_tokens(EST, sent[:2], _mark(9000, sent)) == EST.messages_tokens(sent[:2])


# -- SPEC M-02: calibration -------------------------------------------------------------


def _second_request(
    ratio: float, added: list[ChatMessage] | None = None, system: SystemMessage = SYSTEM
) -> tuple[TurnState, Usage]:
    first: list[ChatMessage] = [SYSTEM, {"role": "user", "content": "read it"}]
    added = _round() if added is None else added
    second = [system, *first[1:], *added]
    state = _state(second, usage=_mark(1000, first))
    reported = 1000 + round(_raw(added) * ratio) + 3 * len(added)
    return state, Usage(prompt_tokens=reported, completion_tokens=10, total_tokens=reported + 10)


def test_scale_measured_between_two_requests_of_the_turn() -> None:
    # SPEC M-02
    state, usage = _second_request(1.2)
    after = observe_usage(EST, state, usage)
    assert after.scale_measured and abs(after.token_scale - 1.2) < 0.01
    assert after.usage is not None and after.usage.prompt_tokens == usage.prompt_tokens
    assert after.usage.request_messages == len(state.messages)


def test_scale_is_clamped_to_half_and_one_and_a_half() -> None:
    # SPEC M-02: 0.5-1.5
    assert observe_usage(EST, *_second_request(2.5)).token_scale == 1.5
    assert observe_usage(EST, *_second_request(0.35)).token_scale == 0.5


def test_first_request_of_a_turn_only_records_usage() -> None:
    # SPEC M-02: a sample needs two requests of one turn
    state, usage = _second_request(1.2)
    after = observe_usage(EST, state.model_copy(update={"usage": None}), usage)
    assert not after.scale_measured and after.token_scale == 1.0 and after.usage is not None


def _excluded(state: TurnState, usage: Usage) -> None:
    after = observe_usage(EST, state, usage)
    assert not after.scale_measured and after.token_scale == state.token_scale
    assert after.usage is not None  # usage is still recorded for SPEC M-01


def test_excluded_when_the_system_prompt_changed() -> None:
    # SPEC M-02: identical tools/system
    _excluded(*_second_request(1.2, system={"role": "system", "content": "Other rules."}))


def test_excluded_when_images_were_added() -> None:
    # SPEC M-02: text only
    image: UserMessage = {"role": "user", "content": [
        {"type": "text", "text": TEXT},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]}  # fmt: skip
    _excluded(*_second_request(1.2, added=[image]))


def test_excluded_when_the_ratio_is_outside_point_three_to_three() -> None:
    # SPEC M-02
    _excluded(*_second_request(3.5))
    _excluded(*_second_request(0.2))


def test_excluded_when_the_sample_is_under_256_tokens() -> None:
    # SPEC M-02
    _excluded(*_second_request(1.2, added=_round("short result")))


# -- fit() decides on the usage-based count ---------------------------------------------


class _Emitter:
    def __init__(self) -> None:
        self.events: list[Any] = []

    async def emit(self, event_type: Any, ids: dict[str, Any], data: Any) -> None:
        self.events.append(data)


class _Memory(HistoryClient):
    def __init__(self) -> None:
        super().__init__(base_url="http://memory.invalid")
        self.scales: list[tuple[str, float]] = []

    async def store_checkpoint(
        self, tenant_id: str, session_id: str, result: Any, *, credential: str | None = None
    ) -> bool:
        return False

    async def store_token_scale(
        self,
        tenant_id: str,
        session_id: str,
        turn_id: str,
        scale: float,
        *,
        credential: str | None = None,
    ) -> bool:
        self.scales.append((turn_id, scale))
        return True


def _summarizer() -> FunctionModel:
    def reply(call: ModelCall) -> Reply:
        return answer("SUMMARY")

    return FunctionModel(reply=reply)


def _manager(model: FunctionModel, memory: HistoryClient | None = None) -> ContextManager:
    return ContextManager(
        memory=memory or _Memory(), model=model, emitter=cast(EventEmitter, _Emitter()),
        estimator=CachedTokenEstimator(),
    )  # fmt: skip


def _history(turns: int, words: int) -> tuple[list[ChatMessage], list[str | None]]:
    messages: list[ChatMessage] = [SYSTEM]
    ids: list[str | None] = [None]
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": f"answer {i} " + "word " * words},
        ]
        ids += [f"turn-{i}"] * 2
    messages.append({"role": "user", "content": "and now?"})
    return messages, [*ids, None]


async def test_fit_compacts_when_usage_is_over_the_threshold_though_the_estimate_is_not() -> None:
    # SPEC M-01 + M-03: threshold 40000 - 16384; the estimate is ~13000, the provider 30000
    messages, ids = _history(14, 900)
    assert EST.messages_tokens(messages) < 20_000
    model = _summarizer()
    state = _state(messages, turn_ids=ids, usage=_mark(30_000, messages))
    after = await _manager(model).fit(state)
    assert model.calls, "the summarizer was not asked"
    assert after.messages != messages and after.usage is None  # SPEC M-06: baseline reset


async def test_fit_keeps_the_messages_when_usage_is_under_the_threshold() -> None:
    # SPEC M-01: the estimate says ~30000 (over), the provider says 12000 (under)
    messages, ids = _history(6, 5000)
    assert EST.messages_tokens(messages) > 24_000
    model = _summarizer()
    state = _state(messages, turn_ids=ids, usage=_mark(12_000, messages))
    after = await _manager(model).fit(state)
    assert not model.calls and after is state
    # the same history without usage is compacted: the usage made the difference
    await _manager(model).fit(state.model_copy(update={"usage": None}))
    assert model.calls


async def test_fit_applies_the_turns_scale_to_the_estimate() -> None:
    # SPEC M-02: the session's scale multiplies the BPE count of text
    messages, ids = _history(6, 3000)
    assert 17_000 < EST.messages_tokens(messages) < 23_000
    model = _summarizer()
    await _manager(model).fit(_state(messages, turn_ids=ids, token_scale=0.5))
    assert not model.calls
    await _manager(model).fit(_state(messages, turn_ids=ids, token_scale=1.5))
    assert model.calls


def test_a_scaled_view_shares_counts_and_leaves_the_engines_estimator_alone() -> None:
    shared = CachedTokenEstimator()
    view = with_scale(shared, 1.4)
    assert view.text_tokens(TEXT) == round(shared.text_tokens(TEXT) * 1.4)
    assert shared.scale == 1.0 and shared.cached_texts == 1
    assert with_scale(shared, 9.0).scale == 1.5
    assert with_scale(shared, 1.0) is shared


async def test_a_measured_scale_is_stored_on_the_newest_stored_turn_once() -> None:
    # SPEC M-02: persisted as context_token_scale, read back with the next history
    memory = _Memory()
    manager = _manager(_summarizer(), memory)
    messages, ids = _history(2, 10)
    await manager.persist_scale(_state(messages, turn_ids=ids, token_scale=1.3))
    assert memory.scales == []  # nothing measured this turn: no write
    measured = _state(messages, turn_ids=ids, token_scale=1.3, scale_measured=True)
    await manager.persist_scale(measured)
    first = _state(messages[:1], token_scale=0.7, scale_measured=True)
    await manager.persist_scale(first)  # no stored turn yet: this turn's own answer
    assert memory.scales == [("turn-1", 1.3), ("r", 0.7)]
