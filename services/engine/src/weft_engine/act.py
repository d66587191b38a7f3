"""Act: a round's tool calls -> pending calls, dispatch groups, Kafka messages; the round.

``ToolRound`` runs a round: it plans the calls, announces them, publishes them group by
group and sets the deadline that wakes the turn when no worker answers; the turn then
waits (``AwaitTools``) or, every result in, is observed and thinks again (``Continue``).

SPEC E-15: calls run in parallel, but only read-only tools overlap; any other tool is a
barrier that runs alone, after what came before it. SPEC E-16: call ids normalised,
arguments parsed, repaired once when broken, else an error result the model reads.
SPEC A-08: a call of a tool outside the turn's tool set is such an error result too, and
is never published.
SPEC E-17: each call carries a deadline the engine enforces even if no worker answers.
Invariant 3: after a takeover, a dispatched call no replica saw Kafka acknowledge is sent
again (same call id) when its tool is read-only, else answered ``OUTCOME_UNKNOWN`` and
never sent again (``ToolRound.recover``): the turn never waits for a call nobody got.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog
from json_repair import repair_json
from weft_contracts import (
    Envelope,
    Grant,
    ToolApprovalRequiredData,
    ToolApprovalRequiredEvent,
    ToolApprovalResolvedEvent,
    ToolCallCompleted,
    ToolCallCompletedData,
    ToolCallData,
    ToolCallEvent,
    ToolCallRequested,
    ToolCallRequestedData,
    ToolContext,
    Topic,
    tool_not_allowed,
)
from weft_contracts.text import clean_json
from weft_llm import LLMResponse, ToolCallRequest
from weft_platform.bus import EventBus
from weft_tool_catalog.specs import SANDBOX_TOOLS, spec_by_name

from weft_engine.approvals import (
    ApprovalGate,
    Settled,
    Suspensions,
    ask_authorization,
    ask_uncertain,
    authorization_needed,
)
from weft_engine.emitter import EventEmitter
from weft_engine.leases import AckedDispatch, TurnLeases
from weft_engine.masking import masked_arguments, prepare_masking
from weft_engine.metering import with_tool_calls
from weft_engine.observe import ERROR_HINT, observe
from weft_engine.outcomes import AwaitTools, Continue, Dispatch
from weft_engine.prompt import display_hint
from weft_engine.reporting import ResultReporter
from weft_engine.state import CallApproval, PendingCall, StaleTurnState, TurnState, TurnStore
from weft_engine.tracing import TurnTracer
from weft_engine.turn_tools import offered_names

log = structlog.get_logger(__name__)

WEB_FETCH_PAGE_BUDGET_S = 180.0
TOOL_TIMEOUTS_S = {"shell_exec": 605.0, "web_fetch": WEB_FETCH_PAGE_BUDGET_S + 5.0}
"""Per-tool deadlines (SPEC E-17); others use the engine's default (60 s)."""


class ArgumentsError(ValueError):
    """The model's arguments are not a JSON object, even after repair."""


def parse_arguments(raw: str) -> dict[str, Any]:
    """Parse JSON arguments; repair them once when broken (SPEC E-16)."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = repair_json(raw, return_objects=True)
    if not isinstance(value, dict):
        raise ArgumentsError(f"tool arguments must be a JSON object, got: {raw[:200]}")
    # "\u0000" or a lone "\ud800" escape in the model's JSON would reach tools and storage.
    cleaned: dict[str, Any] = clean_json(value)
    return cleaned


def turn_call_ids(state: TurnState) -> set[str]:
    """The call ids the turn's earlier rounds used."""
    return {call.call_id for step in state.steps for call in step.tool_calls}


def normalise_call_id(call: ToolCallRequest, state: TurnState, index: int, taken: set[str]) -> str:
    """A non-empty id unique within the turn, even when the provider sends none or sends
    one again: some providers count ``call_0``, ``call_1``... in every response, and a
    write call's id met twice in one turn is taken by the workers for a redelivery of
    the first (reported, never run). ``taken``: the ids used so far (the earlier rounds',
    this response's before ``index``); the id returned is added to it. The assistant
    message and the tool messages the model reads next carry the id returned."""
    model_id = call.id.strip() or f"call_{state.round}_{index}"
    call_id, n = model_id, 0
    while call_id in taken:
        n += 1
        call_id = f"{model_id}~r{state.round}.{index}" + (f".{n}" if n > 1 else "")
    taken.add(call_id)
    return call_id


def is_read_only(tool_name: str) -> bool:
    """Unknown tools (sandbox, MCP) are treated as writes: they never overlap."""
    spec = spec_by_name(tool_name)
    return spec is not None and spec.read_only


def plan_calls(
    state: TurnState, calls: list[ToolCallRequest], default_timeout_s: float
) -> tuple[list[PendingCall], dict[str, str]]:
    """Pending calls in the model's order and the errors known before dispatch: a tool
    outside the turn's tool set (SPEC A-08; such a call never leaves the engine, whatever
    the model was talked into) or arguments that are not an object (SPEC E-16)."""
    offered = offered_names(state.agent, state.mcp_tools)
    pending: list[PendingCall] = []
    errors: dict[str, str] = {}
    taken = turn_call_ids(state)
    for index, call in enumerate(calls):
        call_id = normalise_call_id(call, state, index, taken)
        try:
            arguments = parse_arguments(call.arguments)
        except ValueError as exc:
            errors[call_id] = f"{exc}\n{ERROR_HINT}"
            arguments = {}
        if call.name not in offered:
            errors[call_id] = tool_not_allowed(call.name, offered)
        timeout = TOOL_TIMEOUTS_S.get(call.name, default_timeout_s)
        pending.append(
            PendingCall(
                call_id=call_id,
                tool_name=call.name,
                arguments=arguments,
                arguments_json=json.dumps(arguments, ensure_ascii=False),
                read_only=is_read_only(call.name),
                timeout_s=timeout,
            )
        )
    return pending, errors


def dispatch_groups(pending: list[PendingCall]) -> list[list[str]]:
    """Consecutive read-only calls share a group; any other call is a group of its own."""
    groups: list[list[str]] = []
    for call in pending:
        if call.read_only and groups and _all_read_only(groups[-1], pending):
            groups[-1].append(call.call_id)
        else:
            groups.append([call.call_id])
    return groups


def _all_read_only(group: list[str], pending: list[PendingCall]) -> bool:
    by_id = {c.call_id: c for c in pending}
    return all(by_id[cid].read_only for cid in group)


def dispatch_messages(
    state: TurnState, call_ids: list[str]
) -> tuple[list[PendingCall], list[ToolCallRequested]]:
    """Give the calls absolute deadlines from now and build their Kafka messages."""
    now = time.time()
    faq = state.agent.faq
    context = ToolContext(
        user_id=state.user_id,
        agent_id=state.agent.agent_id,
        knowledge_base_ids=state.agent.knowledge_base_ids,
        max_output_chars=state.agent.tool_output_max_chars,
        retrieval_tenant_id=state.agent.retrieval_tenant_id,
        key_knowledge_base_ids=state.agent.key_knowledge_base_ids,
        allowed_tools=offered_names(state.agent, state.mcp_tools),  # the workers check it too
        mcp_server_ids=[server.id for server in state.agent.mcp_servers],
        mcp_auth_wait_s=state.agent.mcp_auth_wait_s if state.agent.mcp_servers else None,
        allowed_skills=[skill.name for skill in state.agent.skills],
        document_ids=state.agent.search_document_ids,
        faq_tags=state.agent.search_faq_tags,
        faq_score_boost=faq.score_boost if faq.priority_enabled else None,
    )
    updated: list[PendingCall] = []
    messages: list[ToolCallRequested] = []
    waiting = {cid for cid, a in state.approvals.items() if a.status == "waiting"}
    for call in state.pending:
        if call.call_id not in call_ids or call.call_id in state.results or call.call_id in waiting:
            updated.append(call)  # a call a person is asked about waits unsent (SPEC H-02)
            continue
        deadline = now + call.timeout_s
        updated.append(call.model_copy(update={"deadline": deadline}))
        messages.append(
            ToolCallRequested(
                **state.ids(),
                data=ToolCallRequestedData(
                    call_id=call.sent_id(),
                    tool_name=call.tool_name,
                    arguments=call.arguments,
                    round=state.round,
                    deadline=datetime.fromtimestamp(deadline, UTC),
                    context=context,
                ),
            )
        )
    return updated, messages


class ToolRound:
    """Runs a round's tool calls: dispatch, announce, deadlines; built once per replica."""

    def __init__(
        self,
        *,
        bus: EventBus,
        store: TurnStore,
        emitter: EventEmitter,
        reporter: ResultReporter,
        leases: TurnLeases,
        tracer: TurnTracer,
        tool_timeout_s: float,
        gate: ApprovalGate | None = None,
        suspensions: Suspensions | None = None,
    ):
        self._gate = gate or ApprovalGate(_NoGrants())
        self._suspensions = suspensions
        self._bus = bus
        self._store = store
        self._emitter = emitter
        self._reporter = reporter
        self._leases = leases
        self._tracer = tracer
        self._tool_timeout = tool_timeout_s

    async def start(
        self, state: TurnState, response: LLMResponse, outcome: Dispatch
    ) -> Continue | AwaitTools:
        """Plan the model's calls and dispatch the first group (SPEC E-15..E-17)."""
        pending, errors = plan_calls(state, outcome.calls, self._tool_timeout)
        await prepare_masking(call.tool_name for call in pending)
        review = await self._gate.review(state, pending, errors)  # SPEC H-01
        state, errors = review.state, {**errors, **review.denied}
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
        state = with_tool_calls(state, len(pending))
        calls = [
            ToolCallData(
                round=state.round, call_id=call.call_id, tool_name=call.tool_name,
                arguments=masked_arguments(call.tool_name, call.arguments),  # SPEC E-23
                display_hint=display_hint(call.tool_name),
            )
            for call in pending
        ]  # fmt: skip
        news = _RoundNews(calls, list(results.values()), review.prompts)
        advanced = await self.advance(state, news)
        for call in calls:  # logged once dispatched: the log line is not on the round's path
            log.info("tool_call", request_id=state.request_id, call_id=call.call_id,
                     tool=call.tool_name, arguments=call.arguments)  # fmt: skip
        for prompt in review.prompts:
            log.info("approval_asked", request_id=state.request_id, prompt_id=prompt.prompt_id,
                     call_id=prompt.call_id, tool=prompt.tool_name, risk=prompt.risk)  # fmt: skip
        return advanced

    async def advance(
        self, state: TurnState, news: _RoundNews | None = None
    ) -> Continue | AwaitTools:
        """Dispatch the next group once the previous answered; the observed state when the
        round is over, else wait (the turn holds nothing in memory while tools run).

        ``news`` of a new round are announced after the state is written (which reserves
        their ``seq`` in the same round trip), right before the first group is published,
        so the events and the calls leave in one produce request and each event's time is
        its call's dispatch.

        The observed state is not written here: it follows from the stored one, so the
        step's next write (or a takeover's own observe) covers it, and the claim that
        started the step already dropped the tool deadline."""
        while state.dispatched_results_in():
            if state.dispatched_groups >= len(state.groups):
                if news is not None:
                    await self._announce(state, news)
                await self._emitter.stopped_streaming(state.request_id)
                return Continue(observe(state))
            group = state.groups[state.dispatched_groups]
            pending, messages = dispatch_messages(
                state, [c for c in group if c not in state.results]
            )
            messages = [self._traced(state, m) for m in messages]
            state = state.model_copy(
                update={
                    "pending": pending,
                    "dispatched_groups": state.dispatched_groups + 1,
                    "approvals": _sent(state, messages),
                }
            )
            if messages or _asks(state, group):
                return AwaitTools(await self._publish(state, messages, news))
        if news is not None:
            await self._announce(state, news)
        due = earliest_deadline(state)
        if due is None:  # only a person is waited for: nothing wakes the turn but a decision
            await self._leases.clear_deadline(state.request_id)
        else:
            await self._leases.set_deadline(state.request_id, due)
        return AwaitTools(state)

    async def _publish(
        self,
        state: TurnState,
        messages: list[ToolCallRequested],
        news: _RoundNews | None,
        results: list[ToolCallCompletedData] | None = None,
    ) -> TurnState:
        """Write the state with the group's deadline, then send the round's events and the
        group's calls together. ``results``: results the state holds that no event has
        reported yet (a takeover's "outcome unknown"); a new round's are in ``news``."""
        # The round's text (queued deltas) goes first: the write below makes the turn
        # wait for its tools, and a replica that dies after it leaves the outbox's events
        # to be published at their seqs, past any seq of this step still unsent.
        await self._emitter.flush(state.request_id)
        due = self._leases.deadline(state.request_id, earliest_deadline(state))
        # The tool_call events, and the results known before dispatch, wait in the turn's
        # outbox until acked: a replica that dies before leaves them to whoever reserves
        # the turn's next seq (``outbox``).
        calls = [] if news is None else _calls(news)
        reported = [*(results or []), *([] if news is None else news.early)]
        state, staged = await self._reporter.save_reporting(
            state, reported, before=calls, deadline=due
        )
        await self._kept(state)  # before anyone sees the prompts
        await self._emitter.stopped_streaming(state.request_id)
        await self._emitter.queue_outboxed(*staged)
        # Queued in the same loop iteration as the events (queueing does not suspend),
        # they share one produce request. Keyed by call id, the calls have no order to
        # keep: one wait for all acks.
        acks = [await self._bus.publish_nowait(_topic(m), _keyed(m)) for m in messages]
        await asyncio.gather(*acks)
        # Recorded by the write that releases the step's lease: a replica that stops
        # before it leaves a takeover to re-send or report the calls (``recover``).
        acked = AckedDispatch(state.round, state.dispatched_groups)
        self._leases.note_acked(state.request_id, acked)
        await self._emitter.flush(state.request_id)  # the round's tool_call events
        return state

    async def apply_decision(self, settled: Settled, credential: str | None) -> TurnState:
        """Save a person's decision (or an expiry) with its ``tool_approval_resolved`` and,
        for a refusal, the call's error result; an approved call is then sent. Raises
        :class:`StaleTurnState` when the turn changed since it was read."""
        state = settled.state
        if credential is not None:  # the turn goes on with the credential the decision brings
            state = state.model_copy(update={"credential": credential})
        resolved = [(ToolApprovalResolvedEvent, settled.resolved)]
        if settled.result is not None:
            saved, staged = await self._reporter.save_reporting(
                state, [settled.result], before=resolved
            )
            await self._emitter.queue_outboxed(*staged)
            await self._emitter.flush(state.request_id)
            return saved
        call_id = settled.resolved.call_id
        if not _group_reached(state, call_id):
            # Approved before the round reached its group: ``advance`` sends it in order.
            return await self._store.save(state)
        pending, messages = dispatch_messages(state, [call_id])
        state = state.model_copy(update={"pending": pending})
        due = self._leases.deadline(state.request_id, earliest_deadline(state))
        saved, staged = await self._reporter.save_reporting(
            state, [], before=resolved, deadline=due
        )
        await self._emitter.queue_outboxed(*staged)
        await self._emitter.flush(state.request_id)
        return await self._send_approved(saved, messages)

    async def resend_approved(self, state: TurnState, call_id: str) -> TurnState:
        """An approved call whose sending no write recorded: send it again, same call id."""
        pending, messages = dispatch_messages(state, [call_id])
        state = state.model_copy(update={"pending": pending})
        due = self._leases.deadline(state.request_id, earliest_deadline(state))
        saved = await self._store.save(state, deadline=due)
        return await self._send_approved(saved, messages)

    async def _send_approved(
        self, state: TurnState, messages: list[ToolCallRequested]
    ) -> TurnState:
        """Publish an approved call, then record it sent (``dispatched``): until then a
        takeover counts it unacknowledged (``unacknowledged``)."""
        acks = [await self._bus.publish_nowait(_topic(m), _keyed(self._traced(state, m)))
                for m in messages]  # fmt: skip
        await asyncio.gather(*acks)
        for _ in range(5):
            current = await self._store.load(state.request_id)
            if current is None:
                return state
            marks = _sent(current, messages)
            if marks == current.approvals:
                return current
            try:
                return await self._store.save(current.model_copy(update={"approvals": marks}))
            except StaleTurnState:
                continue
        return state

    async def _kept(self, state: TurnState) -> None:
        """A turn that waits for a person is in memory before its prompts are out (SPEC
        H-02): a Redis lost right after a person saw the question loses no turn."""
        if self._suspensions is not None and state.waiting_on_person():
            await self._suspensions.keep(state)

    async def recover(self, state: TurnState, acked: AckedDispatch | None) -> TurnState:
        """After a takeover, the dispatched calls without a result that no replica saw
        Kafka acknowledge (``acked``): a read-only one is sent again with its call id and
        a fresh deadline (a duplicate result is ignored, results are recorded once by
        call id); a write is never sent again on its own (invariant 3): a person is asked
        whether it runs again or is skipped (SPEC H-05, ``approvals.ask_uncertain``)."""
        unsure = unacknowledged(state, acked)
        if not unsure:
            return state
        writes = [c for c in unsure if not c.read_only]
        state, prompts = ask_uncertain(state, writes, time.time())  # SPEC H-05
        pending, messages = dispatch_messages(state, [c.call_id for c in unsure if c.read_only])
        state = state.model_copy(update={"pending": pending})
        log.warning("tool_calls_recovered", request_id=state.request_id,
                    resent=[m.data.call_id for m in messages],
                    asked=[c.call_id for c in writes])  # fmt: skip
        traced = [self._traced(state, m) for m in messages]
        news = _RoundNews([], [], prompts) if prompts else None
        if traced:
            return await self._publish(state, traced, news)
        # Stored with their events (the outbox): clients must see the prompts.
        state, reported = await self._reporter.save_reporting(
            state, [], before=None if news is None else _calls(news)
        )
        await self._kept(state)
        await self._emitter.queue_outboxed(*reported)  # the step flushes
        return state

    async def ask_uncertain_result(self, result: ToolCallCompleted) -> TurnState | None:
        """SPEC H-05: a worker answered that a write may have run (its claim was found
        after a crash): a person decides whether it runs again, instead of the model
        reading "outcome unknown". The turn waiting, or None when the result is for
        nothing this handles (then it is recorded as any result)."""
        return await self._ask_instead(
            result, lambda state, call: ask_uncertain(state, [call], time.time()), writes=True
        )

    async def ask_authorization_result(self, result: ToolCallCompleted) -> TurnState | None:
        """SPEC H-06: an MCP server wants the user's authorisation before the call runs:
        the user is asked (the prompt carries the authorisation URL) instead of the model
        reading the failure. The turn waiting, or None when the result is not that."""
        needed = authorization_needed(result.data)
        if needed is None:
            return None
        return await self._ask_instead(
            result, lambda state, call: ask_authorization(state, call, needed, time.time())
        )

    async def _ask_instead(
        self,
        result: ToolCallCompleted,
        ask: Callable[[TurnState, PendingCall], tuple[TurnState, list[ToolApprovalRequiredData]]],
        *,
        writes: bool = False,
    ) -> TurnState | None:
        """Ask a person about ``result``'s call (``ask``) instead of recording the result."""
        for _ in range(5):
            state = await self._store.load(result.request_id)
            call = None if state is None else state.call_sent_as(result.data.call_id)
            if state is None or call is None or call.call_id in state.results:
                return None
            if writes and call.read_only:
                return None
            asked = state.approvals.get(call.call_id)
            if asked is not None and asked.status == "waiting":
                return state  # a redelivered result: asked already
            state, prompts = ask(state, call)
            try:
                saved, staged = await self._reporter.save_reporting(
                    state, [], before=_calls(_RoundNews([], [], prompts))
                )
            except StaleTurnState:
                continue
            await self._kept(saved)
            await self._emitter.queue_outboxed(*staged)
            await self._emitter.flush(state.request_id)
            return saved
        raise StaleTurnState(result.request_id)

    async def _announce(self, state: TurnState, news: _RoundNews) -> None:
        """Queue the round's ``tool_call`` events, then the results of calls that failed
        before dispatch, when no write stores the round (nothing was dispatched: the round
        is thought again after a crash, and announced again)."""
        await self._emitter.emit_many(state.ids(), _calls(news))
        for result in news.early:
            await self._reporter.report(state, result)

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
    prompts: list[ToolApprovalRequiredData] = field(default_factory=list)
    """SPEC H-02: calls a person is asked about, announced after the calls."""


def unacknowledged(state: TurnState, acked: AckedDispatch | None) -> list[PendingCall]:
    """Dispatched calls without a result whose dispatch no step recorded as
    acknowledged by Kafka (``acked`` counts the round's first groups)."""
    safe = acked.groups if acked is not None and acked.round == state.round else 0
    unsure = {cid for group in state.groups[safe : state.dispatched_groups] for cid in group}
    # A call a person is asked about and not sent yet is not unsure; one the approval
    # desk sent (approved, with a deadline) is sure only once its sending was recorded
    # (``dispatched``), whatever its group's acknowledgement says.
    asked = state.approvals
    deadlines = {c.call_id: c.deadline for c in state.pending}
    unsure = {cid for cid in unsure if cid not in asked or asked[cid].status == "dispatched"}
    unsure |= {cid for cid, a in asked.items() if a.status == "approved" and deadlines.get(cid)}
    return [c for c in state.pending if c.call_id in unsure and c.call_id not in state.results]


def _topic(message: ToolCallRequested) -> Topic:
    return Topic.SANDBOX_CALLS if message.data.tool_name in SANDBOX_TOOLS else Topic.TOOL_CALLS


class SandboxCall(ToolCallRequested):
    """A call on ``sandbox.calls``: keyed by session (ARCHITECTURE, workspace affinity), so
    a session's calls reach the replica that already holds its workspace."""

    def key(self) -> bytes:
        """The session id."""
        return self.session_id.encode()


def _keyed(message: ToolCallRequested) -> ToolCallRequested:
    if message.data.tool_name not in SANDBOX_TOOLS:
        return message
    return SandboxCall.model_construct(**dict(message))


def earliest_deadline(state: TurnState) -> float | None:
    """The first deadline of a sent call without a result; None when only a person is
    waited for (the wait holds no deadline, SPEC H-02)."""
    open_calls = [
        c.deadline for c in state.pending if c.deadline and c.call_id not in state.results
    ]
    if open_calls:
        return min(open_calls)
    return None if state.waiting_on_person() else time.time() + 60


def _calls(news: _RoundNews) -> list[tuple[Callable[..., Envelope], Any]]:
    """The round's ``tool_call`` events, then its ``tool_approval_required`` ones."""
    calls: list[tuple[Callable[..., Envelope], Any]] = [(ToolCallEvent, d) for d in news.calls]
    return calls + [(ToolApprovalRequiredEvent, prompt) for prompt in news.prompts]


def _sent(state: TurnState, messages: list[ToolCallRequested]) -> dict[str, CallApproval]:
    """The approvals with the approved calls that ``messages`` send marked ``dispatched``
    (a call run again goes out under another id: mapped back to its own)."""
    sent = {c.call_id for m in messages if (c := state.call_sent_as(m.data.call_id))}
    return {
        cid: a.model_copy(update={"status": "dispatched"})
        if cid in sent and a.status == "approved" else a
        for cid, a in state.approvals.items()
    }  # fmt: skip


def _group_reached(state: TurnState, call_id: str) -> bool:
    """Whether the round has dispatched the group of ``call_id`` (E-15's order)."""
    return any(call_id in group for group in state.groups[: state.dispatched_groups])


def _asks(state: TurnState, group: list[str]) -> bool:
    """A call of the group waits for a person: the group is sent without it."""
    return any(a.status == "waiting" for cid, a in state.approvals.items() if cid in group)


class _NoGrants:
    """No grant source: every question is asked."""

    async def live_grants(self, state: TurnState) -> list[Grant]:
        return []
