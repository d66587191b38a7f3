"""TurnLoop: one step of a turn, run by whichever replica holds the turn's lease.

A step resumes the turn, then repeats think -> analyze -> act until the turn waits for
its tools or ends. A step that takes the turn over from a replica that stopped
(``_take_over``) first settles what that replica left uncertain: calls whose dispatch it
did not see acknowledged (``ToolRound.recover``) and a half-streamed round, which runs
again after a marker that tells clients to drop its text (``Rerun``).

Each round returns a ``StepResult`` (think again, rerun, wait, end), matched in ``_run``;
every way a turn ends is an ``EndReason``, matched in ``_finish``, the one place that
calls the ``Finisher`` (STYLE principle 1). While tools run the turn lives only in Redis.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import assert_never

from redis.asyncio import Redis
from weft_contracts import (
    AgentMode,
    AgentStep,
    ErrorCode,
    FinalAnswerData,
    FinalAnswerEvent,
    SupersededBy,
)
from weft_llm import AssistantMessage, ChatModel, LLMCallError, LLMResponse, UserMessage
from weft_platform.budgets import BudgetExceeded
from weft_platform.bus import EventBus

from weft_engine.act import ToolRound
from weft_engine.analyze import analyze
from weft_engine.approvals import ApprovalGate, Suspensions
from weft_engine.context import ContextManager
from weft_engine.emitter import EventEmitter
from weft_engine.finalize import Finisher, TurnFailure, final_step, llm_failure
from weft_engine.keys import cancel_key
from weft_engine.leases import TurnLeases
from weft_engine.metering import TurnMeter
from weft_engine.outcomes import (
    AlreadyCompleted,
    AlreadyEnded,
    Answer,
    Answered,
    AwaitTools,
    ClosingFailed,
    ContextOverflow,
    Continue,
    DeadlineExceeded,
    Dispatch,
    Ended,
    EndReason,
    Intermediate,
    IterationLimit,
    ModelFailed,
    OverBudget,
    QuickAnswered,
    Rerun,
    Retry,
    StepResult,
    Stopped,
    TooManyTakeovers,
)
from weft_engine.overflow import is_context_overflow, shed_history
from weft_engine.quick_answer import QuickAnswer
from weft_engine.reporting import ResultReporter
from weft_engine.scheduler import StepStart
from weft_engine.sessions import SteerInbox
from weft_engine.state import TurnState, TurnStore
from weft_engine.takeover import catch_up, read_takeover
from weft_engine.think import Thinker, ThinkSettings
from weft_engine.tracing import TurnTracer
from weft_engine.trails import TurnTrails
from weft_engine.turn_metrics import ending
from weft_engine.vision import ImageDescriber

MAX_ITERATIONS_REASON = "You have reached the maximum number of reasoning steps."
LLM_FAILED_REASON = "The model failed repeatedly."
CANCEL_REASON = "The user stopped the task."
DEADLINE_REASON = "The task ran out of time."
TURN_DEADLINE = "The turn took longer than the engine allows and was ended."
QUICK_ANSWER_REASON = "Answer the question using the retrieved passages."
EVERY_REPLICA_FAILED = "The turn failed on every engine replica that took it over."
OVER_BUDGET = "This workspace used up its {budget} of {limit} tokens; try again after {resets}."
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
        trails: TurnTrails | None = None,
        meter: TurnMeter | None = None,
        gate: ApprovalGate | None = None,
        suspensions: Suspensions | None = None,
    ):
        self._redis = redis
        self._trails = trails
        self._store = store
        self._emitter = emitter
        self._finisher = finisher
        self._reporter = reporter
        self._inbox = inbox
        self._leases = leases  # the scheduler's half of a step: tests claim with it
        self._context = context
        self._tracer = tracer or TurnTracer(None)
        self._meter = meter or TurnMeter(None, None)
        self._vision = vision or ImageDescriber(model, emitter)
        self._thinker = Thinker(model, emitter, think_settings)
        self._tools = ToolRound(
            bus=bus, store=store, emitter=emitter, reporter=reporter, leases=leases,
            tracer=self._tracer, tool_timeout_s=tool_timeout_s, gate=gate,
            suspensions=suspensions,
        )  # fmt: skip
        self._quick = QuickAnswer(
            model=model, tools=self._tools, tracer=self._tracer, meter=self._meter
        )

    @property
    def tool_round(self) -> ToolRound:
        """The replica's ``ToolRound`` (the approval desk sends approved calls with it)."""
        return self._tools

    async def run_step(self, start: StepStart) -> None:
        """Advance the turn as far as it can go now."""
        request_id = start.request_id
        state = start.known_state() or await self._store.load(request_id)
        if state is None or state.phase == "opening":
            return  # ended, or still opening: TurnIntake submits its first step
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
            # Taken at once, before any await: every cancel requested so far (a stop the
            # scheduler delivered again counts twice), so no redelivery lands in what follows.
            task = asyncio.current_task()
            while task is not None and task.uncancel() > 0:
                pass
            if not await cancel_requested(self._redis, request_id):
                raise  # shutdown: the scheduler hands the turn over
            await self._finish(await self._stopped(request_id))

    async def _run(self, state: TurnState, takeover: bool, stopped: bool, *, polled: bool) -> None:
        """Step until the turn waits or ends. ``polled``: the claim that started the step
        saw no stop flag and no steer message, so the first round skips that round trip;
        a stop arriving since still interrupts the step through pub/sub, and a steer
        message is still seen before an answer is final (``_handle``, SPEC E-13)."""
        result = await self._resume(state, takeover, stopped)
        shed = False
        while True:
            match result:
                case Continue(state):
                    shed = shed or result.shed
                    result = await self._round(state, polled=polled, shed=shed)
                    polled = False
                case Rerun(state):
                    await self._discard(state)
                    result = Continue(state)
                case AwaitTools(waiting):
                    # SPEC H-02: it holds nothing (memory already keeps it: ToolRound)
                    if waiting.waiting_on_person():
                        await self._finisher.set_aside(waiting)
                    return
                case Ended(reason):
                    await self._finish(reason)
                    return
                case _:
                    assert_never(result)

    async def _round(self, state: TurnState, *, polled: bool, shed: bool) -> StepResult:
        """One round: deadline? stop? steers, context, limit, think, then what the answer
        means."""
        if _overdue(state):  # SPEC E-20: a clock read, no round trip
            return Ended(DeadlineExceeded(state))
        if exceeded := await self._meter.exceeded(state):
            return Ended(OverBudget(state, exceeded))
        if state.images_to_describe:  # SPEC E-26: first step of a turn with images
            state = await self._store.save(await self._vision.read_pending(state))
            polled = False  # describing took a while: look for a stop or steer again
        if state.agent.mode == AgentMode.QUICK_ANSWER:
            return await self._quick.step(state)
        stopped, steers = await self._poll(state.request_id, polled)
        if stopped:
            return Ended(await self._stopped(state.request_id))
        state = await self._context.fit(state)  # SPEC E-05: context first
        state = await self._take_steers(state, steers)
        if self._iterations_exhausted(state):  # SPEC E-21
            return Ended(IterationLimit(state))
        state = self._tracer.begin_round(state)
        try:
            response = await self._thinker.round(state)
        except LLMCallError as exc:  # SPEC E-07
            return await self._model_failed(state, exc, shed=shed)
        state = await self._meter.add(state, response.usage)
        state = self._context.observe(self._tracer.add_usage(state, response.usage), response.usage)
        return await self._handle(state, response)

    async def _handle(self, state: TurnState, response: LLMResponse) -> StepResult:
        """What the analysed response leads to."""
        # A waiting steer message only changes an answer (SPEC E-13): a round that calls
        # tools skips the Redis round trip.
        steered = not response.tool_calls and await self._inbox.waiting(state.request_id)
        outcome, counters = analyze(response, state.counters, steered=steered)
        state = state.model_copy(update={"counters": counters})
        match outcome:
            case Answer():
                return Ended(Answered(state, outcome, response.reasoning))
            case Retry(nudge):
                message: UserMessage = {"role": "user", "content": nudge}
                state = state.model_copy(update={"messages": [*state.messages, message]})
                return Continue(await self._saved(state))
            case Intermediate():
                await self._supersede(state)
                return Continue(await self._saved(self._intermediate(state, outcome, response)))
            case Dispatch():
                return await self._tools.start(state, response, outcome)
            case _:
                assert_never(outcome)

    async def _finish(self, reason: EndReason) -> None:
        """End the turn for ``reason``: the one place that calls the Finisher."""
        with ending(reason):  # the end reason of weft_turns_ended_total
            await self._end(reason)

    async def _end(self, reason: EndReason) -> None:
        """The Finisher call (or the closing synthesis) of each end reason."""
        match reason:
            case Answered(state, answer, reasoning):
                done = state.model_copy(update={"steps": final_step(state, reasoning)})
                await self._finisher.answer(done, answer)
            case Stopped(state, cut_round) if state.has_tool_results():  # SPEC E-20: rescue
                await asyncio.shield(self._rescue_stopped(state, cut_round))
            case Stopped(state):
                await asyncio.shield(self._finisher.cancelled(state))
            case IterationLimit(state):  # SPEC E-21
                await self._closing(state, MAX_ITERATIONS_REASON)
            case DeadlineExceeded(state) if state.has_tool_results():  # SPEC E-20: rescue
                await self._closing(state, DEADLINE_REASON)
            case DeadlineExceeded(state):
                overdue = TurnFailure(code=ErrorCode.TURN_DEADLINE_EXCEEDED, message=TURN_DEADLINE)
                await self._finisher.fail(state, overdue)
            case OverBudget(state, exceeded):
                await self._finisher.fail(state, over_budget(exceeded))
            case ModelFailed(state) | ContextOverflow(state) if state.has_tool_results():
                await self._closing(state, LLM_FAILED_REASON)  # SPEC E-07: rescue
            case ModelFailed(state, error) | ContextOverflow(state, error):
                await self._finisher.fail(state, llm_failure(error))
            case QuickAnswered(state):  # its one generation is its answer, not a rescue
                await self._closing(state, QUICK_ANSWER_REASON, thinking=True)
            case ClosingFailed(state, error):
                await self._finisher.fail(state, llm_failure(error))
            case TooManyTakeovers(state):
                gave_up = TurnFailure(code=ErrorCode.ENGINE_ERROR, message=EVERY_REPLICA_FAILED)
                await self._finisher.fail(state, gave_up)
            case AlreadyCompleted(state):
                await self._finisher.forget(state)
            case AlreadyEnded():
                pass
            case _:
                assert_never(reason)

    async def _resume(self, state: TurnState, takeover: bool, stopped: bool) -> StepResult:
        """Where the step starts: a stop, a takeover, the round's next tool group, or
        thinking."""
        if stopped:
            return Ended(await self._stopped(state.request_id))
        if takeover:
            return await self._take_over(state)
        return await self._go_on(state)

    async def _go_on(self, state: TurnState) -> StepResult:
        """The round's next tool group, or thinking."""
        if state.phase == "waiting":
            if _overdue(state):  # not one more tool group past the bound (SPEC E-20)
                return Ended(DeadlineExceeded(state))
            state = await self._reporter.expire_overdue(state)
            return await self._tools.advance(state)
        return Continue(state)

    async def _take_over(self, state: TurnState) -> StepResult:
        """The turn's last replica stopped during a step (invariant 2): end a turn it
        completed or that failed on every replica; settle the calls it may not have
        sent; run again a round it was streaming (a round whose outcome the stored state
        holds keeps its text)."""
        seen = await read_takeover(self._redis, state.request_id)
        if seen.completed:
            # Its complete may wait in the outbox: the stopped replica set the once-only
            # flag and died before the ack.
            await self._emitter.drain(state.request_id)
            return Ended(AlreadyCompleted(state))
        if self._trails is not None:
            await catch_up(self._trails, self._emitter, state)
        if seen.attempt > MAX_TAKEOVERS:
            return Ended(TooManyTakeovers(state))
        if state.phase == "waiting" and not _overdue(state):
            state = await self._tools.recover(state, seen.acked)
        result = await self._go_on(state)
        match result:
            case Continue(next_state) if next_state.round == seen.streamed_round:
                return Rerun(next_state)
            case _ if seen.streamed_round is not None:
                await self._emitter.clear_streaming(state.request_id)  # that text is kept
        return result

    async def _stopped(self, request_id: str) -> EndReason:
        """The user stopped the turn: its stored state, the stop flag taken down."""
        state = await self._store.load(request_id)
        if state is None:
            return AlreadyEnded()
        cut_round = await self._emitter.streaming_round(request_id)
        await self._emitter.clear_streaming(request_id)
        await self._redis.delete(cancel_key(request_id))
        return Stopped(state, cut_round)

    async def _model_failed(self, state: TurnState, exc: LLMCallError, *, shed: bool) -> StepResult:
        """A failed round: once per step a context overflow sheds history and retries
        (SPEC E-25); otherwise the turn ends."""
        await self._emitter.stopped_streaming(state.request_id)
        if not is_context_overflow(exc):
            return Ended(ModelFailed(state, exc))
        if shed:
            return Ended(ContextOverflow(state, exc))
        return Continue(await self._store.save(await self._shed(state)), shed=True)

    async def _closing(self, state: TurnState, reason: str, *, thinking: bool = False) -> None:
        """A last answer from what was gathered, without tools and, unless ``thinking``,
        with thinking off (SPEC E-21, E-07, E-20); ends the turn with it."""
        state = self._tracer.begin_round(state)
        try:
            response = await self._thinker.closing(state, reason, thinking=thinking)
        except LLMCallError as exc:
            await self._finish(ClosingFailed(state, exc))
            return
        state = self._tracer.add_usage(await self._meter.add(state, response.usage), response.usage)
        text = response.content  # as streamed: stored and streamed answers agree
        answer = Answer(text) if text.strip() else Answer(reason, is_fallback=True)
        await self._finish(Answered(state, answer, response.reasoning))

    async def _poll(self, request_id: str, polled: bool) -> tuple[bool, list[str]]:
        if polled:
            return False, []
        return await self._inbox.poll(request_id, cancel_key(request_id))

    async def _saved(self, state: TurnState) -> TurnState:
        saved = await self._store.save(state)
        await self._emitter.stopped_streaming(state.request_id)
        return saved

    async def _supersede(self, state: TurnState) -> None:
        """SPEC E-13: close the round whose answer the steer made intermediate, before the
        next round streams, so a client drops its deltas instead of showing both rounds."""
        marker = FinalAnswerData(
            round=state.round, delta="", done=True, superseded=True,
            superseded_by=SupersededBy.STEER,
        )  # fmt: skip
        await self._emitter.emit(FinalAnswerEvent, state.ids(), marker)

    async def _rescue_stopped(self, state: TurnState, cut_round: int | None) -> None:
        """SPEC E-20: the closing answer of a stopped turn, after a marker that voids the
        text the stop cut short (in no step and no stored message), so the deltas after
        the last superseded marker are the answer, as docs/api.md promises."""
        if cut_round is not None:
            marker = FinalAnswerData(
                round=cut_round, delta="", done=True, superseded=True,
                superseded_by=SupersededBy.STOP,
            )  # fmt: skip
            await self._emitter.emit(FinalAnswerEvent, state.ids(), marker)
        await self._closing(state, CANCEL_REASON)

    async def _discard(self, state: TurnState) -> None:
        """Invariant 2: before the round a stopped replica was streaming runs again,
        clients drop every thought and answer delta of it; the rerun's own ``complete``
        is the turn's one (SPEC E-04)."""
        marker = FinalAnswerData(
            round=state.round, delta="", done=True, superseded=True,
            superseded_by=SupersededBy.RERUN,
        )  # fmt: skip
        await self._emitter.emit(FinalAnswerEvent, state.ids(), marker)
        await self._emitter.clear_streaming(state.request_id)

    def _intermediate(
        self, state: TurnState, outcome: Intermediate, response: LLMResponse
    ) -> TurnState:
        message: AssistantMessage = {"role": "assistant", "content": outcome.text}
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
        injected: list[UserMessage] = [{"role": "user", "content": m} for m in messages]
        return await self._store.save(
            state.model_copy(update={"messages": [*state.messages, *injected]})
        )


def over_budget(exceeded: BudgetExceeded) -> TurnFailure:
    """The ``budget_exceeded`` failure: retryable once the window resets."""
    resets = datetime.fromtimestamp(exceeded.resets_at, UTC).strftime("%H:%M UTC")
    budget = exceeded.budget.replace("_", " ")
    message = OVER_BUDGET.format(budget=budget, limit=exceeded.limit, resets=resets)
    return TurnFailure(code=ErrorCode.BUDGET_EXCEEDED, message=message, retryable=True)


def _overdue(state: TurnState) -> bool:
    """The turn ran past its wall-clock bound (a state without one has none)."""
    return 0 < state.deadline_at <= time.time()


async def cancel_requested(redis: Redis, request_id: str) -> bool:
    """Whether the user stopped the turn."""
    return bool(await redis.exists(cancel_key(request_id)))
