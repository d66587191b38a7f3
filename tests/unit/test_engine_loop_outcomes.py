"""Every way a step goes on and every way a turn ends, without infrastructure: TurnLoop
driven by the in-process model double (``weft_testkit.function_model``), the real store,
emitter, leases and finisher on an in-memory Redis (fakeredis, with its Lua), and a bus
that keeps what it is given.

One test per ``StepResult`` case (think again, rerun, wait for tools, end) and per ``EndReason``
(SPEC E-07, E-09..E-14, E-20, E-21, E-25, A-01); the last test keeps that list complete.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any, cast, get_args

import pytest
from fakeredis import FakeAsyncRedis
from weft_contracts import (
    AgentConfig,
    AgentMode,
    Envelope,
    ToolCallCompletedData,
    Topic,
    TurnBudget,
)
from weft_engine.act import TOOL_TIMEOUTS_S
from weft_engine.analyze import EMPTY_FALLBACK, NUDGE
from weft_engine.approvals import Suspensions
from weft_engine.context import ContextManager
from weft_engine.emitter import EventEmitter
from weft_engine.finalize import MODEL_CONTEXT_FULL, MODEL_REFUSED, Finisher
from weft_engine.history_client import HistoryClient
from weft_engine.keys import cancel_key
from weft_engine.leases import TurnLeases
from weft_engine.loop import (
    CANCEL_REASON,
    DEADLINE_REASON,
    EVERY_REPLICA_FAILED,
    LLM_FAILED_REASON,
    MAX_ITERATIONS_REASON,
    MAX_TAKEOVERS,
    QUICK_ANSWER_REASON,
    TURN_DEADLINE,
    TurnLoop,
)
from weft_engine.metering import TurnMeter
from weft_engine.outcomes import (
    AlreadyCompleted,
    AlreadyEnded,
    Answered,
    ClosingFailed,
    ContextOverflow,
    DeadlineExceeded,
    EndReason,
    IterationLimit,
    ModelFailed,
    OverBudget,
    QuickAnswered,
    Stopped,
    TooManyTakeovers,
)
from weft_engine.reporting import ResultReporter
from weft_engine.scheduler import StepStart
from weft_engine.sessions import SessionGate, SteerInbox
from weft_engine.settings import EngineSettings
from weft_engine.state import PendingCall, TurnState, TurnStore
from weft_engine.think import ThinkSettings
from weft_engine.token_cache import CachedTokenEstimator
from weft_engine.trails import TurnTrails
from weft_llm import ContextOverflowError, LLMCallError, Usage
from weft_platform.budgets import BudgetLimits, TokenBudgets
from weft_platform.bus import EventBus
from weft_testkit.function_model import FunctionModel, ModelCall, Reply, answer, replies, tool_calls

OVERFLOW = "Error code: 400 - This model's maximum context length is 8192 tokens"


@dataclass
class _Bus:
    """The bus's publishing side: keeps every message, acks at once."""

    sent: list[tuple[Topic, Envelope]] = field(default_factory=list)

    async def publish(self, topic: Topic, message: Envelope) -> None:
        self.sent.append((topic, message))

    async def publish_nowait(self, topic: Topic, message: Envelope) -> asyncio.Future[Any]:
        self.sent.append((topic, message))
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class _Context(ContextManager):
    """Nothing to compact: a forced compaction frees nothing, so overflow sheds history."""

    async def fit(self, state: TurnState, *, force_reason: str | None = None) -> TurnState:
        return state


@dataclass
class _Engine:
    """One replica's engine parts on an in-memory Redis."""

    redis: FakeAsyncRedis
    bus: _Bus
    store: TurnStore
    inbox: SteerInbox
    leases: TurnLeases
    model: FunctionModel | None = None
    trails: TurnTrails | None = None
    meter: TurnMeter | None = None
    suspensions: Suspensions | None = None

    def loop(self, model: FunctionModel) -> TurnLoop:
        self.model = model
        emitter = EventEmitter(cast(EventBus, self.bus), self.redis, ttl_s=60)
        finisher = Finisher(
            emitter=emitter, store=self.store, leases=self.leases,
            sessions=SessionGate(self.redis, 60),
        )  # fmt: skip
        context = _Context(
            memory=HistoryClient(base_url="http://127.0.0.1:9"), model=model, emitter=emitter,
            estimator=CachedTokenEstimator(),
        )  # fmt: skip
        return TurnLoop(
            bus=cast(EventBus, self.bus), redis=self.redis, store=self.store, emitter=emitter,
            model=model, finisher=finisher, reporter=ResultReporter(self.store, emitter),
            inbox=self.inbox, leases=self.leases, context=context,
            think_settings=ThinkSettings(retry_backoff_s=(), coalesce_window_s=0.0),
            tool_timeout_s=60, trails=self.trails, meter=self.meter,
            suspensions=self.suspensions,
        )  # fmt: skip

    async def step(self, model: FunctionModel, state: TurnState, takeover: bool = False) -> None:
        """What the scheduler does: claim the lease, then run the step with what it read."""
        claim = await self.leases.claim_step(state.request_id)
        assert claim is not None
        await self.loop(model).run_step(StepStart(state.request_id, takeover, claim))

    def events(self, state: TurnState) -> list[Envelope]:
        return [
            m for t, m in self.bus.sent
            if t is Topic.AGENT_EVENTS and m.request_id == state.request_id
        ]  # fmt: skip

    def types(self, state: TurnState) -> list[str]:
        return [cast(Any, e).type for e in self.events(state)]

    def data(self, state: TurnState, kind: str) -> list[Any]:
        return [cast(Any, e).data for e in self.events(state) if cast(Any, e).type == kind]

    def complete(self, state: TurnState) -> Any:
        [complete] = self.data(state, "complete")
        return complete

    def error(self, state: TurnState) -> tuple[str, str]:
        [error] = self.data(state, "error")
        return error.code, error.message

    def last_request_text(self) -> str:
        assert self.model is not None
        return str(self.model.calls[-1].last_message.get("content"))


@pytest.fixture
async def engine() -> AsyncIterator[_Engine]:
    redis = FakeAsyncRedis()
    yield _Engine(
        redis=redis, bus=_Bus(), store=TurnStore(redis, ttl_s=60), inbox=SteerInbox(redis, 60),
        leases=TurnLeases(redis, owner="r1", namespace="t.", ttl_s=6),
    )  # fmt: skip
    await redis.aclose()


def _agent(**update: Any) -> AgentConfig:
    return AgentConfig(**{"agent_id": "a", "model": "m", "allowed_tools": ["thinking"], **update})


async def _turn(engine: _Engine, agent: AgentConfig | None = None, **update: Any) -> TurnState:
    state = TurnState(
        tenant_id="t", session_id=f"s_{secrets.token_hex(4)}",
        request_id=f"req_{secrets.token_hex(6)}", user_id="u", agent=agent or _agent(),
        started_at=time.time(),
        **{"messages": [{"role": "user", "content": "Plan my trip."}], **update},
    )  # fmt: skip
    return await engine.store.save(state)


async def _answered_tools(
    engine: _Engine, agent: AgentConfig | None = None, **update: Any
) -> TurnState:
    """A turn whose only tool call has its result: the next step observes and thinks."""
    return await _turn(
        engine, agent, **update, phase="waiting", groups=[["c1"]], dispatched_groups=1,
        pending=[PendingCall(call_id="c1", tool_name="thinking", arguments={},
                             arguments_json="{}")],
        results={"c1": ToolCallCompletedData(call_id="c1", tool_name="thinking", success=True,
                                             output="noted")},
    )  # fmt: skip


# --- the step goes on: Continue -------------------------------------------------------


async def test_continue_after_a_nudge_for_an_empty_answer(engine: _Engine) -> None:
    """SPEC E-11: an empty answer is retried with a nudge in the same step, no round used."""
    state = await _turn(engine)
    await engine.step(replies(answer(""), answer("Lisbon in May.")), state)
    assert engine.last_request_text().endswith(NUDGE)  # joined to the question
    complete = engine.complete(state)
    assert (complete.status, complete.final_answer, complete.rounds) == (
        "completed", "Lisbon in May.", 1,
    )  # fmt: skip


async def test_continue_after_an_answer_a_steer_made_intermediate(engine: _Engine) -> None:
    """SPEC E-13: a steer message arriving during the call turns the answer into a step;
    the next round reads it."""
    state = await _turn(engine)

    async def reply(call: ModelCall) -> Reply:
        if call.index == 0:
            await engine.inbox.put(state.request_id, "Only trains, please.")
            return answer("Fly to Lisbon.")
        return answer("Take the train to Lisbon.")

    await engine.step(FunctionModel(reply=reply), state)
    assert engine.last_request_text().endswith("Only trains, please.")
    complete = engine.complete(state)
    assert complete.final_answer == "Take the train to Lisbon." and complete.rounds == 2
    assert complete.steps[0].thought == "Fly to Lisbon."
    # The steered round is closed as superseded before the next round streams, so the
    # deltas after the marker are exactly the answer.
    answers = engine.data(state, "final_answer")
    [marker] = [i for i, a in enumerate(answers) if a.superseded]
    assert answers[marker].done and answers[marker].delta == "" and answers[marker].round == 0
    assert answers[marker].superseded_by == "steer"
    assert "".join(a.delta for a in answers[:marker]) == "Fly to Lisbon."
    assert {a.round for a in answers[marker + 1 :]} == {1}
    assert "".join(a.delta for a in answers[marker + 1 :]) == complete.final_answer
    assert [a.superseded for a in answers if a.done] == [True, False]


async def test_continue_after_a_tool_round_that_failed_before_dispatch(engine: _Engine) -> None:
    """SPEC A-08, E-16: a call outside the tool set is answered by the engine itself, so
    the round is over in the step and the model reads the error at once."""
    state = await _turn(engine)
    model = replies(tool_calls(("shell_exec", {"command": "ls"})), answer("I cannot run that."))
    await engine.step(model, state)
    assert [t for t, _ in engine.bus.sent if t is not Topic.AGENT_EVENTS] == []
    assert model.calls[1].last_message["role"] == "tool"
    kinds = [
        k for i, k in enumerate(engine.types(state)) if i == 0 or engine.types(state)[i - 1] != k
    ]
    assert kinds[-4:] == ["tool_call", "tool_result", "final_answer", "complete"]


async def test_continue_after_a_context_overflow_sheds_history_once(engine: _Engine) -> None:
    """SPEC E-25: the first overflow of a step drops old history turns and asks again."""
    history = [
        {"role": "user", "content": f"Question {n}"} if n % 2 == 0
        else {"role": "assistant", "content": f"Answer {n}"}
        for n in range(6)
    ]  # fmt: skip
    now = {"role": "user", "content": "Plan my trip.\n<runtime_context>x</runtime_context>"}
    state = await _turn(engine, messages=[*history, now])
    model = replies(ContextOverflowError(OVERFLOW, status=400), answer("Lisbon."))
    await engine.step(model, state)
    first, second = model.requests
    assert len(second.messages) < len(first.messages) and second.messages[-1] == now
    assert engine.complete(state).final_answer == "Lisbon."


async def test_rerun_of_a_round_a_stopped_replica_was_streaming(engine: _Engine) -> None:
    """Invariant 2: a takeover that finds round 0 half-streamed closes it with the rerun
    marker, then thinks it again in the same step; the answer is what follows the marker."""
    state = await _turn(engine)
    await engine.redis.set(f"weft:turn:{state.request_id}:streaming", 0)
    await engine.step(replies(answer("Lisbon in May.")), state, takeover=True)
    answers = engine.data(state, "final_answer")
    assert (answers[0].superseded, answers[0].superseded_by, answers[0].round) == (
        True, "rerun", 0,
    )  # fmt: skip
    assert "".join(a.delta for a in answers[1:]) == engine.complete(state).final_answer
    assert not await engine.redis.exists(f"weft:turn:{state.request_id}:streaming")


# --- the turn waits: AwaitTools -------------------------------------------------------


async def test_await_tools_publishes_the_calls_and_ends_the_step(engine: _Engine) -> None:
    """SPEC E-15, E-17: the calls leave with the state written as waiting and a deadline;
    the turn holds nothing in memory and has not ended."""
    state = await _turn(engine, _agent(allowed_tools=["thinking", "web_search"]))
    await engine.step(replies(tool_calls(("web_search", {"query": "Lisbon trains"}))), state)
    [(topic, call)] = [(t, m) for t, m in engine.bus.sent if t is not Topic.AGENT_EVENTS]
    assert topic is Topic.TOOL_CALLS and cast(Any, call).data.tool_name == "web_search"
    stored = await engine.store.load(state.request_id)
    assert stored is not None and stored.phase == "waiting" and stored.dispatched_groups == 1
    assert await engine.redis.zscore("weft:t.deadlines", state.request_id) is not None
    assert engine.types(state) == ["tool_call"]


# --- the turn ends: one test per EndReason ---------------------------------------------


async def test_answered_with_the_models_text(engine: _Engine) -> None:
    """SPEC E-10: a natural stop's text is the answer, streamed then marked done."""
    state = await _turn(engine)
    await engine.step(replies(answer("Lisbon in May.")), state)
    assert engine.types(state)[-2:] == ["final_answer", "complete"]
    complete = engine.complete(state)
    assert (complete.status, complete.final_answer, complete.is_fallback) == (
        "completed", "Lisbon in May.", False,
    )  # fmt: skip
    assert await engine.store.load(state.request_id) is None


async def test_answered_with_the_fallback_after_empty_answers(engine: _Engine) -> None:
    """SPEC E-11: after two nudges the fixed fallback answers, sent as its own delta."""
    state = await _turn(engine)
    await engine.step(replies(answer(""), answer(""), answer("")), state)
    complete = engine.complete(state)
    assert (complete.final_answer, complete.is_fallback) == (EMPTY_FALLBACK, True)
    assert [d.delta for d in engine.data(state, "final_answer")] == [EMPTY_FALLBACK, ""]


async def test_stopped_without_tool_results_is_cancelled(engine: _Engine) -> None:
    """SPEC E-20: a stop before anything was gathered ends the turn cancelled, no call."""
    state = await _turn(engine)
    await engine.redis.set(cancel_key(state.request_id), 1)
    model = replies()
    await engine.step(model, state)
    assert model.calls == [] and engine.types(state) == ["complete"]
    assert engine.complete(state).status == "cancelled"
    assert not await engine.redis.exists(cancel_key(state.request_id))


async def test_stopped_with_tool_results_is_rescued_by_a_synthesis(engine: _Engine) -> None:
    """SPEC E-20, E-21: with results, a closing call without tools answers from them."""
    state = await _answered_tools(engine)
    await engine.redis.set(cancel_key(state.request_id), 1)
    model = replies(answer("From the notes: Lisbon."))
    await engine.step(model, state)
    [request] = model.requests
    assert request.tool_choice == "none" and CANCEL_REASON in engine.last_request_text()
    complete = engine.complete(state)
    assert (complete.status, complete.final_answer) == ("completed", "From the notes: Lisbon.")


async def test_stopped_during_a_model_call_interrupts_the_step(engine: _Engine) -> None:
    """SPEC E-20: a stop cancels the running call; the turn ends cancelled, once."""
    state = await _turn(engine)

    async def reply(call: ModelCall) -> Reply:
        await engine.redis.set(cancel_key(state.request_id), 1)
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # what the stop's pub/sub message does to the running step
        await asyncio.sleep(0)
        raise AssertionError("the stop did not interrupt the call")

    await engine.step(FunctionModel(reply=reply), state)
    assert engine.types(state) == ["complete"]
    assert engine.complete(state).status == "cancelled"


async def test_already_ended_when_a_stop_finds_no_state(engine: _Engine) -> None:
    """A stop for a turn another replica has finished meanwhile sends nothing."""
    state = await _turn(engine)

    async def reply(call: ModelCall) -> Reply:
        await engine.store.delete(state.request_id)
        await engine.redis.set(cancel_key(state.request_id), 1)
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)
        raise AssertionError("the stop did not interrupt the call")

    await engine.step(FunctionModel(reply=reply), state)
    assert engine.types(state) == []


async def test_iteration_limit_ends_with_a_synthesis_without_thinking(engine: _Engine) -> None:
    """SPEC E-21: past the last round a closing call, no tools, at the synthesis effort."""
    agent = _agent(max_iterations=1, reasoning_effort="high", synthesis_reasoning_effort="off")
    state = await _answered_tools(engine, agent)
    model = replies(answer("What I found: Lisbon."))
    await engine.step(model, state)
    [request] = model.requests
    assert MAX_ITERATIONS_REASON in engine.last_request_text()
    assert (request.tool_choice, request.reasoning_effort) == ("none", "off")
    assert engine.complete(state).final_answer == "What I found: Lisbon."


async def test_deadline_exceeded_without_tool_results_is_an_error(engine: _Engine) -> None:
    """SPEC E-20: a turn past its wall-clock bound with nothing gathered ends with the
    stable code, without another model call."""
    state = await _turn(engine, deadline_at=time.time() - 1)
    model = replies()
    await engine.step(model, state)
    assert model.calls == []
    assert engine.error(state) == ("turn_deadline_exceeded", TURN_DEADLINE)
    assert engine.types(state) == ["error", "complete"]
    assert engine.complete(state).status == "failed"


async def test_deadline_exceeded_with_tool_results_is_rescued(engine: _Engine) -> None:
    """SPEC E-20: past the bound when its tools answered, the turn is not thought on: a
    closing call without tools answers from the results."""
    state = await _answered_tools(engine, deadline_at=time.time() - 1)
    model = replies(answer("From the notes: Lisbon."))
    await engine.step(model, state)
    [request] = model.requests
    assert request.tool_choice == "none" and DEADLINE_REASON in engine.last_request_text()
    complete = engine.complete(state)
    assert (complete.status, complete.final_answer) == ("completed", "From the notes: Lisbon.")


async def test_deadline_exceeded_dispatches_no_further_tool_group(engine: _Engine) -> None:
    """SPEC E-20: woken past the bound between two tool groups, the turn sends no more
    calls; the first group's result is enough for the rescue."""
    second = PendingCall(call_id="c2", tool_name="web_search", arguments={"query": "trains"},
                         arguments_json='{"query": "trains"}', read_only=False)  # fmt: skip
    answered = await _answered_tools(engine, deadline_at=time.time() - 1)
    state = await engine.store.save(
        answered.model_copy(
            update={"groups": [["c1"], ["c2"]], "pending": [*answered.pending, second]}
        )
    )
    model = replies(answer("From the notes: Lisbon."))
    await engine.step(model, state)
    assert [t for t, _ in engine.bus.sent if t is not Topic.AGENT_EVENTS] == []
    assert DEADLINE_REASON in engine.last_request_text()
    assert engine.complete(state).final_answer == "From the notes: Lisbon."


async def test_deadline_is_checked_at_the_start_of_every_round(engine: _Engine) -> None:
    """SPEC E-20: the bound passing during a round ends the turn before the next one; the
    empty answer's retry (SPEC E-11) is never asked."""
    state = await _turn(engine, deadline_at=time.time() + 0.2)

    async def reply(call: ModelCall) -> Reply:
        await asyncio.sleep(state.deadline_at - time.time() + 0.01)  # outlive the bound
        return answer("")

    model = FunctionModel(reply=reply)
    await engine.step(model, state)
    assert len(model.calls) == 1
    assert engine.error(state) == ("turn_deadline_exceeded", TURN_DEADLINE)


async def test_a_turn_within_its_deadline_runs_as_before(engine: _Engine) -> None:
    """SPEC E-20: the bound ends only overdue turns; a state without one (0) has none."""
    for deadline_at in (time.time() + 60, 0.0):
        state = await _turn(engine, deadline_at=deadline_at)
        await engine.step(replies(answer("Lisbon.")), state)
        assert engine.complete(state).final_answer == "Lisbon."


def test_the_default_turn_deadline_outlasts_the_longest_tool() -> None:
    """SPEC E-20: a turn can always wait for its slowest tool's own timeout."""
    default = EngineSettings.model_fields["turn_deadline_s"].default
    assert default == 20 * 60 and default > max(TOOL_TIMEOUTS_S.values())


async def test_model_failed_without_tool_results_is_an_error(engine: _Engine) -> None:
    """SPEC E-07: a final model failure ends with a clean ``llm_error``, then complete."""
    state = await _turn(engine)
    await engine.step(replies(LLMCallError("Error code: 401 - sk-12")), state)
    assert engine.types(state)[-2:] == ["error", "complete"]
    assert engine.error(state) == ("llm_error", MODEL_REFUSED)
    assert engine.complete(state).status == "failed"


async def test_model_failed_with_tool_results_is_rescued(engine: _Engine) -> None:
    """SPEC E-07, E-20: with results, the failing round is followed by a synthesis."""
    state = await _answered_tools(engine)
    model = replies(LLMCallError("Error code: 401"), answer("Noted: Lisbon."))
    await engine.step(model, state)
    assert LLM_FAILED_REASON in engine.last_request_text()
    complete = engine.complete(state)
    assert (complete.status, complete.final_answer) == ("completed", "Noted: Lisbon.")


async def test_context_overflow_after_its_one_retry_is_an_error(engine: _Engine) -> None:
    """SPEC E-25: a second overflow in the step ends the turn (no shedding loop)."""
    state = await _turn(engine)
    overflow = ContextOverflowError(OVERFLOW, status=400)
    model = replies(overflow, overflow)
    await engine.step(model, state)
    assert len(model.calls) == 2
    assert engine.error(state) == ("llm_error", MODEL_CONTEXT_FULL)


async def test_closing_failed_when_the_synthesis_fails_too(engine: _Engine) -> None:
    """SPEC E-21: a closing call that fails leaves no rescue: ``llm_error``."""
    state = await _answered_tools(engine, _agent(max_iterations=1))
    await engine.step(replies(LLMCallError("Error code: 401")), state)
    assert engine.error(state) == ("llm_error", MODEL_REFUSED)
    assert engine.complete(state).status == "failed"


async def test_already_completed_when_a_takeover_finds_the_complete_sent(engine: _Engine) -> None:
    """SPEC E-04: a replica that stopped after the turn's complete but before forgetting
    it leaves only that to do: no model call, no event, the session handed on."""
    state = await _turn(engine)
    await engine.redis.set(f"weft:turn:{state.request_id}:completed", 1)
    await engine.redis.set(f"weft:turn:{state.request_id}:streaming", 0)
    model = replies()
    await engine.step(model, state, takeover=True)
    assert model.calls == [] and engine.types(state) == []
    assert await engine.store.load(state.request_id) is None


async def test_too_many_takeovers_end_the_turn(engine: _Engine) -> None:
    """A step that crashed on every replica that took it over is not run again."""
    state = await _turn(engine)
    await engine.redis.set(f"weft:turn:{state.request_id}:takeovers", MAX_TAKEOVERS)
    model = replies()
    await engine.step(model, state, takeover=True)
    assert model.calls == []
    assert engine.error(state) == ("engine_error", EVERY_REPLICA_FAILED)


async def test_quick_answer_retrieves_then_its_one_generation_answers(engine: _Engine) -> None:
    """SPEC A-01: the first step dispatches the retrieval itself (AwaitTools, no model
    call); once its results are in, one generation at the agent's effort answers."""
    agent = _agent(
        mode=AgentMode.QUICK_ANSWER, allowed_tools=["search_knowledge"], query_rewrite=False,
        reasoning_effort="high", synthesis_reasoning_effort="off",
    )  # fmt: skip
    state = await _turn(engine, agent)
    await engine.step(replies(), state)
    [(topic, call)] = [(t, m) for t, m in engine.bus.sent if t is not Topic.AGENT_EVENTS]
    assert topic is Topic.TOOL_CALLS and cast(Any, call).data.arguments == {
        "query": "Plan my trip."
    }
    waiting = await engine.store.load(state.request_id)
    assert waiting is not None
    result = ToolCallCompletedData(
        call_id="call_qa_0", tool_name="search_knowledge", success=True, output="Lisbon."
    )
    await engine.store.save(waiting.model_copy(update={"results": {"call_qa_0": result}}))
    model = replies(answer("Lisbon, from the passages."))
    await engine.step(model, state)
    [request] = model.requests
    assert QUICK_ANSWER_REASON in engine.last_request_text()
    assert (request.tool_choice, request.reasoning_effort) == ("none", "high")
    assert engine.complete(state).final_answer == "Lisbon, from the passages."


def _metered(engine: _Engine, per_minute: int) -> TokenBudgets:
    budgets = TokenBudgets(engine.redis)
    engine.meter = TurnMeter(budgets, BudgetLimits(tokens_per_minute=per_minute))
    return budgets


async def test_over_budget_finishes_the_round_then_stops(engine: _Engine) -> None:
    """A round that crosses the tenant's budget finishes (its tool call runs); the next
    round's model call is not made: ``budget_exceeded`` (retryable), then ``complete``
    with the turn's usage so far."""
    budgets = _metered(engine, per_minute=100)
    state = await _turn(engine)
    costly = replace(
        tool_calls(("thinking", {"thought": "hm"})),
        usage=Usage(prompt_tokens=90, completion_tokens=30, total_tokens=120),
    )
    await engine.step(replies(costly), state)
    assert (await budgets.used("t"))["tokens_per_minute"] == 120
    waiting = await engine.store.load(state.request_id)
    assert waiting is not None and waiting.metered.tool_calls == 1
    answered = await engine.store.save(
        waiting.model_copy(
            update={"results": {c.call_id: ToolCallCompletedData(
                call_id=c.call_id, tool_name="thinking", success=True, output="ok",
            ) for c in waiting.pending}}
        )
    )  # fmt: skip
    model = replies(answer("never asked"))
    await engine.step(model, answered)
    assert model.calls == []
    code, message = engine.error(state)
    assert code == "budget_exceeded" and "tokens per minute" in message
    [error] = engine.data(state, "error")
    assert error.retryable
    usage = engine.complete(state).usage
    assert (usage.input_tokens, usage.output_tokens, usage.llm_calls, usage.tool_calls) == (
        90, 30, 1, 1,
    )  # fmt: skip


async def test_under_budget_the_turn_answers_and_reports_its_usage(engine: _Engine) -> None:
    """Below the budget nothing changes; ``complete`` carries the tokens of every call."""
    budgets = _metered(engine, per_minute=1000)
    state = await _turn(engine)
    first = answer("", usage=Usage(prompt_tokens=10, completion_tokens=1, total_tokens=11))
    second = answer("Lisbon.", usage=Usage(prompt_tokens=12, completion_tokens=3, total_tokens=15))
    await engine.step(replies(first, second), state)
    complete = engine.complete(state)
    assert complete.status == "completed"
    assert (complete.usage.input_tokens, complete.usage.output_tokens) == (22, 4)
    assert complete.usage.llm_calls == 2
    assert (await budgets.used("t"))["tokens_per_minute"] == 26


async def test_the_turn_s_own_budget_wins_over_the_engine_defaults(engine: _Engine) -> None:
    """The budget comes with the turn (the gateway read the tenant's row when it admitted
    it): a turn carrying a lower limit than the engine's defaults stops at its own, and
    one carrying 0 (unlimited) is not held by the defaults."""
    budgets = _metered(engine, per_minute=1000)
    await budgets.spend("t", 120)
    tight = await _turn(engine, budget=TurnBudget(tokens_per_minute=100))
    model = replies(answer("never asked"))
    await engine.step(model, tight)
    assert model.calls == [] and engine.error(tight)[0] == "budget_exceeded"
    _metered(engine, per_minute=1)  # the defaults alone would refuse
    free = await _turn(engine, budget=TurnBudget(tokens_per_minute=0))
    await engine.step(replies(answer("Lisbon.")), free)
    assert engine.complete(free).status == "completed"


def test_every_end_reason_has_its_test_here() -> None:
    """A new way to end a turn is one more case of ``EndReason``: it gets a test above."""
    tested = {
        Answered, Stopped, IterationLimit, DeadlineExceeded, ModelFailed, ContextOverflow,
        ClosingFailed, TooManyTakeovers, QuickAnswered, AlreadyCompleted, AlreadyEnded,
        OverBudget,
    }  # fmt: skip
    assert set(get_args(EndReason)) == tested


async def test_a_step_submitted_while_the_turn_opens_leaves_it_to_the_opener(
    engine: _Engine,
) -> None:
    """A stop arriving while TurnIntake still loads the history submits a step: it must not
    think on a state without messages; the opener submits the first step (with the stop)."""
    state = await _turn(engine, phase="opening", messages=[])
    model = replies(answer("too early"))
    await engine.step(model, state)
    assert model.calls == [] and engine.events(state) == []
    stored = await engine.store.load(state.request_id)
    assert stored is not None and stored.phase == "opening"


async def test_a_stop_mid_answer_after_tool_results_supersedes_the_cut_text(
    engine: _Engine,
) -> None:
    """SPEC E-20, E-10: the text a stop cut short is closed by a superseded marker before
    the closing synthesis streams, so the deltas after the last marker are the turn's
    answer (docs/api.md, "Rendering the answer") and a client shows one answer, not two."""
    state = await _answered_tools(engine)
    closing = replies(answer("From the notes: Lisbon."))

    class _Cut(FunctionModel):
        async def stream(self, request: Any, sink: Any) -> Any:
            if self.calls:
                return await closing.stream(request, sink)
            self.calls.append(ModelCall(index=0, request=request))
            for piece in ("Stopped after ", "writing three."):
                await sink.on_content(piece)
            await engine.redis.set(cancel_key(state.request_id), 1)
            task = asyncio.current_task()
            assert task is not None
            task.cancel()  # the stop's pub/sub message, mid-answer
            await asyncio.sleep(0)
            raise AssertionError("the stop did not interrupt the call")

    await engine.step(_Cut(reply=lambda call: AssertionError("unused")), state)
    answers = engine.data(state, "final_answer")
    cut = [i for i, a in enumerate(answers) if a.delta and "writing" in a.delta]
    markers = [i for i, a in enumerate(answers) if a.superseded]
    assert cut and markers and markers[-1] > cut[-1]
    [marker] = [answers[i] for i in markers]
    assert marker.superseded_by == "stop" and marker.done and marker.delta == ""
    after = "".join(a.delta for a in answers[markers[-1] + 1 :])
    complete = engine.complete(state)
    assert (complete.status, complete.final_answer) == ("completed", "From the notes: Lisbon.")
    assert after == complete.final_answer
