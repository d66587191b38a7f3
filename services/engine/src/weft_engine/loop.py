"""TurnLoop: one step of a turn, run by whichever replica holds the turn's lease.

A step is think -> analyze -> (answer | retry | intermediate | dispatch tools), repeated
until the turn ends or waits for tools; every outcome is handled in one ``match``
(STYLE principle 1). While tools run the turn lives only in Redis.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import assert_never

import structlog
from redis.asyncio import Redis
from weft_contracts import (
    AgentMode,
    AgentStep,
    Envelope,
    ErrorCode,
    ToolCallCompletedData,
    ToolCallData,
    ToolCallEvent,
    ToolCallRequested,
    Topic,
)
from weft_llm import ChatModel, LLMCallError, LLMResponse
from weft_platform.bus import EventBus
from weft_tools.specs import SANDBOX_TOOLS, definitions_for

from weft_engine.act import dispatch_groups, dispatch_messages, plan_calls
from weft_engine.analyze import Counters, analyze
from weft_engine.context import ContextManager
from weft_engine.emitter import EventEmitter
from weft_engine.finalize import (
    Finisher,
    TurnFailure,
    closing_request,
    final_step,
    llm_failure,
)
from weft_engine.keys import cancel_key
from weft_engine.leases import DeadlineUpdate, TurnLeases
from weft_engine.masking import masked_arguments, prepare_masking
from weft_engine.observe import observe
from weft_engine.outcomes import Answer, Dispatch, Fail, Intermediate, Retry
from weft_engine.overflow import current_query, is_context_overflow, shed_history
from weft_engine.prompt import display_hint
from weft_engine.quick_answer import retrieval_calls, retrieval_tools
from weft_engine.reporting import ResultReporter
from weft_engine.rewrite import rewrite_query
from weft_engine.scheduler import StepStart
from weft_engine.sessions import SteerInbox
from weft_engine.state import TurnCounters, TurnState, TurnStore
from weft_engine.think import ThinkSettings, think
from weft_engine.tracing import TurnTracer
from weft_engine.vision import ImageDescriber

log = structlog.get_logger(__name__)

MAX_ITERATIONS_REASON = "You have reached the maximum number of reasoning steps."
LLM_FAILED_REASON = "The model failed repeatedly."
CANCEL_REASON = "The user stopped the task."
REPLICA_LOST = "The engine replica running this turn stopped while answering; please ask again."
EVERY_REPLICA_FAILED = "The turn failed on every engine replica that took it over."
MAX_TAKEOVERS = 3
MAX_STEER_OVERRUNS = 1


class TurnLoop:
    """Runs steps of turns; built once per replica."""

    def __init__(
        self,
        *,
        bus: EventBus,
        redis: Redis,
        store: TurnStore,
        emitter: EventEmitter,
        model: ChatModel,
        finisher: Finisher,
        reporter: ResultReporter,
        inbox: SteerInbox,
        leases: TurnLeases,
        context: ContextManager,
        think_settings: ThinkSettings,
        tool_timeout_s: float,
        tracer: TurnTracer | None = None,
        vision: ImageDescriber | None = None,
    ):
        self._bus = bus
        self._redis = redis
        self._store = store
        self._emitter = emitter
        self._model = model
        self._finisher = finisher
        self._reporter = reporter
        self._inbox = inbox
        self._leases = leases
        self._context = context
        self._think = think_settings
        self._tool_timeout = tool_timeout_s
        self._tracer = tracer or TurnTracer(None)
        self._vision = vision or ImageDescriber(model, emitter)

    async def run_step(self, start: StepStart) -> None:
        """Advance the turn as far as it can go now."""
        request_id = start.request_id
        state = start.known_state() or await self._store.load(request_id)
        if state is None:
            return
        claim = start.claim
        try:
            await self._run_or_stop(state, start.takeover, claim.stopped, polled=not claim.steered)
        except BaseException:
            self._emitter.drop_unacked(request_id)
            raise
        await self._emitter.flush(request_id)  # events the step only queued

    async def _run_or_stop(
        self, state: TurnState, takeover: bool, stopped: bool, *, polled: bool
    ) -> None:
        request_id = state.request_id
        try:
            await self._run(state, takeover, stopped, polled=polled)
        except asyncio.CancelledError:
            if not await cancel_requested(self._redis, request_id):
                raise  # shutdown: the scheduler hands the turn over
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            await self._stop(request_id)

    async def _run(self, state: TurnState, takeover: bool, stopped: bool, *, polled: bool) -> None:
        rid = state.request_id
        if stopped:
            await self._stop(rid)
            return
        if takeover and await self._replica_lost(state):
            return
        if state.phase == "waiting":
            state = await self._reporter.expire_overdue(state)
            advanced = await self._advance_tools(state)
            if advanced is None:
                return
            state = advanced
        await self._think_loop(state, polled=polled)

    async def _replica_lost(self, state: TurnState) -> bool:
        """After a crash: a half-streamed answer cannot be replayed without duplicates."""
        takeovers = int(await self._redis.incr(f"weft:turn:{state.request_id}:takeovers"))
        if await self._emitter.streaming(state.request_id):
            failure = TurnFailure(code=ErrorCode.ENGINE_REPLICA_LOST, message=REPLICA_LOST)
            await self._finisher.fail(state, failure)
            return True
        if takeovers > MAX_TAKEOVERS:
            lost = TurnFailure(code=ErrorCode.ENGINE_ERROR, message=EVERY_REPLICA_FAILED)
            await self._finisher.fail(state, lost)
            return True
        return False

    async def _think_loop(self, state: TurnState, *, polled: bool = False) -> None:
        """Think until the turn ends or waits for tools. ``polled``: the step's load just
        saw no stop flag and no steer message, so the first think skips that round trip
        (issue 3); a stop arriving since still interrupts the step through pub/sub, and a
        steer message is still seen before an answer is final (``_handle``, SPEC E-13)."""
        if state.images_to_describe:  # SPEC E-26: first step of a turn with images
            state = await self._store.save(await self._vision.read_pending(state))
            polled = False  # describing took a while: look for a stop or steer again
        if state.agent.mode == AgentMode.QUICK_ANSWER:
            await self._quick_answer(state)
            return
        overflow_retried = False
        while True:
            stopped, steers = await self._poll(state.request_id, polled)
            polled = False
            if stopped:
                await self._stop(state.request_id)
                return
            state = await self._context.fit(state)  # SPEC E-05: context first
            state = await self._take_steers(state, steers)
            if self._iterations_exhausted(state):  # SPEC E-21
                await self._synthesize(state, MAX_ITERATIONS_REASON)
                return
            state = self._tracer.begin_round(state)
            try:
                response = await self._call_model(state)
            except LLMCallError as exc:  # SPEC E-07
                await self._emitter.mark_streaming(state.request_id, False)
                if is_context_overflow(exc) and not overflow_retried:  # SPEC E-25
                    overflow_retried = True
                    state = await self._store.save(await self._shed(state))
                    continue
                if state.has_tool_results():
                    await self._synthesize(state, LLM_FAILED_REASON)
                else:
                    await self._finisher.fail(state, llm_failure(exc))
                return
            state = self._tracer.add_usage(state, response.usage)
            next_state = await self._handle(state, response)
            if next_state is None:
                return
            state = next_state

    async def _poll(self, request_id: str, polled: bool) -> tuple[bool, list[str]]:
        if polled:
            return False, []
        return await self._inbox.poll(request_id, cancel_key(request_id))

    async def _handle(self, state: TurnState, response: LLMResponse) -> TurnState | None:
        """Apply the analysed outcome; the new state to think again with, or None."""
        # A waiting steer message only changes an answer (SPEC E-13): a round that calls
        # tools skips the Redis round trip.
        steered = not response.tool_calls and await self._inbox.waiting(state.request_id)
        outcome, counters = analyze(
            response, Counters(**state.counters.model_dump()), steered=steered
        )
        state = state.model_copy(update={"counters": TurnCounters(**asdict(counters))})
        match outcome:
            case Answer():
                done = state.model_copy(update={"steps": final_step(state, response.reasoning)})
                await self._finisher.answer(done, outcome)
                return None
            case Fail():
                failure = TurnFailure(code=outcome.code, message=outcome.message)
                await self._finisher.fail(state, failure)
                return None
            case Retry():
                nudge = {"role": "user", "content": outcome.nudge}
                state = state.model_copy(update={"messages": [*state.messages, nudge]})
                return await self._saved(state)
            case Intermediate():
                return await self._saved(self._intermediate(state, outcome, response))
            case Dispatch():
                return await self._start_tools(state, response, outcome)
            case _:
                assert_never(outcome)

    async def _saved(self, state: TurnState, deadline: DeadlineUpdate | None = None) -> TurnState:
        saved = await self._store.save(state, deadline=deadline)
        await self._emitter.mark_streaming(state.request_id, False)
        return saved

    def _intermediate(
        self, state: TurnState, outcome: Intermediate, response: LLMResponse
    ) -> TurnState:
        message = {"role": "assistant", "content": outcome.text}
        overrun = state.steer_overruns
        if 0 <= state.agent.max_iterations <= state.round + 1 and overrun < MAX_STEER_OVERRUNS:
            overrun += 1  # SPEC E-13: one extra round to read the steer message
        step = AgentStep(round=state.round, thought=outcome.text, reasoning=response.reasoning)
        return state.model_copy(
            update={
                "messages": [*state.messages, message],
                "steps": [*state.steps, step],
                "round": state.round + 1,
                "steer_overruns": overrun,
            }
        )

    async def _quick_answer(self, state: TurnState) -> None:
        """SPEC A-01/C-04: rewrite a follow-up question into a standalone query, retrieve
        once with it (knowledge base, and web when the agent has it), then one generation
        without tools; no ReAct loop. (FAQ priority is not built yet.)"""
        if state.round == 0 and retrieval_tools(state.agent):
            query = current_query(state)
            if state.agent.query_rewrite:
                query, rewrite = await rewrite_query(self._model, state, query)
                state = self._tracer.add_usage(state, rewrite.usage if rewrite else None)
            calls = retrieval_calls(state.agent, query)
            state = self._tracer.begin_round(state)
            advanced = await self._start_tools(state, LLMResponse(
                content="", reasoning="", tool_calls=calls, finish_reason="tool_calls"
            ), Dispatch(calls))  # fmt: skip
            if advanced is None:
                return
            state = advanced
        # The quick answer's one generation is its answer, not a rescue: the agent's effort.
        await self._synthesize(
            state, "Answer the question using the retrieved passages.", thinking=True
        )

    async def _shed(self, state: TurnState) -> TurnState:
        """Forced compaction (SPEC E-25); if it freed nothing, drop old history turns."""
        compacted = await self._context.fit(state, force_reason="overflow")
        return compacted if compacted.messages != state.messages else shed_history(state)

    def _iterations_exhausted(self, state: TurnState) -> bool:
        limit = state.agent.max_iterations
        return limit >= 0 and state.round >= limit + state.steer_overruns

    async def _take_steers(self, state: TurnState, messages: list[str]) -> TurnState:
        """SPEC E-05: injected messages join the conversation before the LLM call."""
        if not messages:
            return state
        injected = [{"role": "user", "content": m} for m in messages]
        return await self._store.save(
            state.model_copy(update={"messages": [*state.messages, *injected]})
        )

    async def _call_model(
        self, state: TurnState, *, closing: bool = False, thinking: bool = True
    ) -> LLMResponse:
        """A round's call, or with ``closing`` one without tools (``tool_choice=none``);
        without ``thinking``, at the agent's synthesis effort (SPEC E-21: thinking off)."""
        agent = state.agent
        tools = definitions_for(agent.allowed_tools)
        choice = "none" if closing and tools else None
        effort = agent.reasoning_effort if thinking else agent.synthesis_reasoning_effort
        return await think(
            state, self._model, self._emitter, tools, self._think,
            tool_choice=choice, reasoning_effort=effort,
        )  # fmt: skip

    async def _synthesize(self, state: TurnState, reason: str, *, thinking: bool = False) -> None:
        """A last answer from what was gathered, without tools and, unless ``thinking``,
        with thinking off (SPEC E-21, E-07, E-20)."""
        state = self._tracer.begin_round(state)
        closing = state.model_copy(update={"messages": [*state.messages, closing_request(reason)]})
        try:
            response = await self._call_model(closing, closing=True, thinking=thinking)
        except LLMCallError as exc:
            await self._finisher.fail(state, llm_failure(exc))
            return
        state = self._tracer.add_usage(state, response.usage)
        text = response.content.strip()
        answer = Answer(text) if text else Answer(reason, is_fallback=True)
        done = state.model_copy(update={"steps": final_step(state, response.reasoning)})
        await self._finisher.answer(done, answer)

    async def _stop(self, request_id: str) -> None:
        """The user stopped the turn: rescue synthesis when tools gave results (SPEC E-20)."""
        state = await self._store.load(request_id)
        if state is None:
            return
        await self._emitter.mark_streaming(request_id, False)
        await self._redis.delete(cancel_key(request_id))
        if state.has_tool_results():
            await asyncio.shield(self._synthesize(state, CANCEL_REASON))
        else:
            await asyncio.shield(self._finisher.cancelled(state))

    async def _start_tools(
        self, state: TurnState, response: LLMResponse, outcome: Dispatch
    ) -> TurnState | None:
        pending, errors = plan_calls(state, outcome.calls, self._tool_timeout)
        names = {p.call_id: p.tool_name for p in pending}
        results = {
            cid: ToolCallCompletedData(call_id=cid, tool_name=names[cid], success=False, error=err)
            for cid, err in errors.items()
        }
        state = state.model_copy(
            update={
                "pending": pending,
                "results": results,
                "groups": dispatch_groups(pending),
                "dispatched_groups": 0,
                "preamble": response.content,
                "reasoning": response.reasoning,
                "phase": "waiting",
            }
        )
        await prepare_masking(call.tool_name for call in pending)
        calls = [
            ToolCallData(
                round=state.round, call_id=call.call_id, tool_name=call.tool_name,
                arguments=masked_arguments(call.tool_name, call.arguments),  # SPEC E-23
                display_hint=display_hint(call.tool_name),
            )
            for call in pending
        ]  # fmt: skip
        advanced = await self._advance_tools(state, _RoundNews(calls, list(results.values())))
        for call in calls:  # logged once dispatched: the log line is not on the round's path
            log.info("tool_call", request_id=state.request_id, call_id=call.call_id,
                     tool=call.tool_name, arguments=call.arguments)  # fmt: skip
        return advanced

    async def _announce(
        self, state: TurnState, news: _RoundNews, seqs: range | None = None
    ) -> None:
        """Queue the round's ``tool_call`` events (with ``seqs`` when the state write
        reserved them), then the results of calls that failed before dispatch."""
        events: list[tuple[Callable[..., Envelope], object]] = [
            (ToolCallEvent, data) for data in news.calls
        ]
        if seqs is None:
            await self._emitter.emit_many(state.ids(), events)
        else:
            await self._emitter.queue_reserved(state.ids(), events, seqs)
        for result in news.early:
            await self._reporter.report(state, result)

    async def _advance_tools(
        self, state: TurnState, news: _RoundNews | None = None
    ) -> TurnState | None:
        """Dispatch the next group once the previous answered; the observed state when the
        round is over, else None (the turn waits for tools, holding nothing in memory).

        ``news`` of a new round are announced after the state is written (which reserves
        their ``seq`` in the same round trip), right before the first group is published,
        so the events and the calls leave in one produce request and each event's time is
        its call's dispatch (issue 3).

        The observed state is not written here: it follows from the stored one, so the
        step's next write (or a takeover's own observe) covers it, and the claim that
        started the step already dropped the tool deadline (issue 3: one round trip less
        per round)."""
        while state.dispatched_results_in():
            if state.dispatched_groups >= len(state.groups):
                if news is not None:
                    await self._announce(state, news)
                await self._emitter.mark_streaming(state.request_id, False)
                return observe(state)
            group = state.groups[state.dispatched_groups]
            pending, messages = dispatch_messages(
                state, [c for c in group if c not in state.results]
            )
            messages = [self._traced(state, m) for m in messages]
            state = state.model_copy(
                update={"pending": pending, "dispatched_groups": state.dispatched_groups + 1}
            )
            if messages:
                due = self._leases.deadline(state.request_id, _earliest_deadline(state))
                count = 0 if news is None else len(news.calls)
                state, seqs = await self._store.save_reserving(state, count, deadline=due)
                await self._emitter.mark_streaming(state.request_id, False)
                if news is not None:
                    await self._announce(state, news, seqs)
                # Queued in the same loop iteration as the events (queueing does not
                # suspend), they share one produce request. Keyed by call id, the calls
                # have no order to keep: one wait for all acks.
                acks = [await self._bus.publish_nowait(_topic(m), m) for m in messages]
                await asyncio.gather(*acks)
                await self._emitter.flush(state.request_id)  # the round's tool_call events
                return None
        if news is not None:
            await self._announce(state, news)
        await self._leases.set_deadline(state.request_id, _earliest_deadline(state))
        return None

    def _traced(self, state: TurnState, message: ToolCallRequested) -> ToolCallRequested:
        """The call names its tool span as parent, so a worker's spans join the tree."""
        parent = self._tracer.tool_traceparent(state, message.data.call_id)
        if parent == message.traceparent:
            return message
        return message.model_copy(update={"traceparent": parent})


@dataclass(frozen=True)
class _RoundNews:
    """What a new round announces: its calls, and the results of calls that failed before
    dispatch (SPEC E-16)."""

    calls: list[ToolCallData]
    early: list[ToolCallCompletedData]


def _topic(message: ToolCallRequested) -> Topic:
    return Topic.SANDBOX_CALLS if message.data.tool_name in SANDBOX_TOOLS else Topic.TOOL_CALLS


def _earliest_deadline(state: TurnState) -> float:
    open_calls = [
        c.deadline for c in state.pending if c.deadline and c.call_id not in state.results
    ]
    return min(open_calls, default=time.time() + 60)


async def cancel_requested(redis: Redis, request_id: str) -> bool:
    """Whether the user stopped the turn."""
    return bool(await redis.exists(cancel_key(request_id)))
