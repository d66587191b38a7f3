"""TurnState: everything needed to continue a turn on any replica, and its Redis store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from redis.asyncio import Redis
from weft_contracts import (
    AgentConfig,
    AgentStep,
    Grant,
    McpToolDef,
    PromptKind,
    Reference,
    ToolCallCompletedData,
    TurnBudget,
    TurnUsage,
)
from weft_llm import ChatMessage

from weft_engine.keys import (
    acked_key,
    completed_key,
    images_key,
    outbox_holder_key,
    outbox_key,
    seq_key,
    state_key,
    takeovers_key,
    version_key,
)
from weft_engine.leases import TAKE_STEP_LEASE, DeadlineUpdate, LeaseRequest, StepClaim
from weft_engine.outbox import BUSY, ORPHANED, OUTBOX_GUARD, OutboxWrite, SeqsHeld


class PendingCall(BaseModel):
    """A tool call of the current round."""

    call_id: str
    tool_name: str
    arguments: dict[str, Any]
    arguments_json: str
    read_only: bool = True
    timeout_s: float = Field(default=60.0, gt=0, description="SPEC E-17.")
    deadline: float = Field(default=0.0, description="Epoch seconds once dispatched.")
    dispatch_id: str | None = Field(
        default=None,
        description="SPEC H-05: the id a call approved to run again after an uncertain "
        "outcome is sent under (workers take a write id they saw for a redelivery and "
        "never run it twice); its result is recorded under ``call_id``.",
    )

    def sent_id(self) -> str:
        """The id the workers see."""
        return self.dispatch_id or self.call_id


class CallApproval(BaseModel):
    """A call of the current round that a person is asked about (SPEC H-01..H-03)."""

    prompt_id: str
    kind: PromptKind = "approval"
    status: Literal["waiting", "approved", "dispatched", "settled"] = "waiting"
    """waiting: no decision yet, the call is not sent. approved: the decision is saved,
    the call may not have reached Kafka yet (a takeover treats it as unacknowledged).
    dispatched: sent and acknowledged. settled: denied, expired or cancelled (its result
    is in ``TurnState.results``)."""
    asked_at: float
    expires_at: float
    server_name: str | None = Field(
        default=None, description="SPEC H-06: the MCP server a ``mcp_authorization`` is for."
    )


class TurnCounters(BaseModel):
    """Counters that span the attempts of one turn (``analyze.py`` reads and updates
    them; the turn state carries them between steps)."""

    model_config = ConfigDict(frozen=True)

    empty_retries: int = 0
    """Nudges sent for empty answers in a row (SPEC E-11)."""
    length_rounds: int = 0
    """Responses cut by the output limit in a row (SPEC E-12)."""
    last_content: str | None = None
    """The previous answer's text, to see a stuck model repeat itself (SPEC E-14)."""
    repeats: int = 0
    """How many answers in a row had that text."""


class TurnTrace(BaseModel):
    """What the turn's spans need across steps and replicas (SPEC E-23, ``tracing.py``)."""

    round: int = -1
    """The round whose span is open (-1: none yet)."""
    round_started_at: float = 0.0
    round_input_tokens: int = 0
    round_output_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


class UsageMark(BaseModel):
    """What the provider reported for the turn's last request (SPEC M-01, M-02)."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int
    total_tokens: int
    request_messages: int
    """How many messages that request sent."""
    system_key: str
    """Digest of the system message it sent: calibration compares only requests with the
    same system prompt."""


class FaqMatch(BaseModel):
    """An FAQ entry a search of this turn found (SPEC C-04): what quick-answer's direct
    answer compares with the agent's threshold once the retrieval round is observed."""

    model_config = ConfigDict(frozen=True)

    alias: str
    question: str
    answer: str
    match_score: float = Field(ge=0, le=1)


StoredMessages = Annotated[
    list[ChatMessage], PlainSerializer(lambda messages: messages, return_type=list[dict[str, Any]])
]
"""A turn's messages: validated by role when a state is loaded; saved as the plain dicts
they are. pydantic's serializer for a union of TypedDicts matches each message against
the shapes again, which made a save about three times slower than dumping the dicts."""


class TurnState(BaseModel):
    """The state of one running turn, persisted between steps (ARCHITECTURE, engine)."""

    tenant_id: str
    session_id: str
    request_id: str
    user_id: str
    traceparent: str | None = None
    credential: str | None = Field(
        default=None,
        description="The turn's request credential (from its ChatRequested): forwarded on "
        "the turn's internal calls and in every record the turn produces.",
    )
    agent: AgentConfig
    budget: TurnBudget | None = Field(
        default=None,
        description="The tenant's token budgets, as its ChatRequested carried them (None: "
        "the engine's configured defaults; docs/budgets.md).",
    )
    messages: StoredMessages = Field(description="OpenAI messages sent to the model.")
    turn_ids: list[str | None] = Field(
        default_factory=list,
        description="Stored turn of each leading history message (checkpoints, SPEC M-07).",
    )
    phase: Literal["opening", "think", "waiting"] = Field(
        default="think",
        description="opening: saved before turn_started, history not loaded yet (a "
        "redelivered ChatRequested finishes the opening, TurnIntake.on_chat_requested).",
    )
    round: int = 0
    steps: list[AgentStep] = Field(default_factory=list)
    preamble: str = Field(default="", description="Content of the round that called tools.")
    reasoning: str = ""
    pending: list[PendingCall] = Field(default_factory=list, description="In original order.")
    groups: list[list[str]] = Field(
        default_factory=list, description="Call ids by dispatch group (E-15 barriers)."
    )
    dispatched_groups: int = 0
    results: dict[str, ToolCallCompletedData] = Field(default_factory=dict)
    references: list[Reference] = Field(default_factory=list)
    counters: TurnCounters = Field(default_factory=TurnCounters)
    steer_overruns: int = 0
    images_to_describe: list[str] = Field(
        default_factory=list,
        description="SPEC E-26: images for a model without vision, read into the query "
        "as text before the first think (vision.ImageDescriber); data URIs parked "
        "(parked_images).",
    )
    approvals: dict[str, CallApproval] = Field(
        default_factory=dict, description="The round's calls a person is asked about, by id."
    )
    mcp_tools: list[McpToolDef] = Field(
        default_factory=list,
        description="SPEC T-19: MCP tools published this turn (described by "
        "discover_mcp_tools), offered by name from the next round on (turn_tools).",
    )
    grants: list[Grant] | None = Field(
        default=None,
        description="SPEC H-04: the session's live grants, read from memory once per turn "
        "(when a call would ask) and again after each decision; None: not read yet.",
    )
    person_wait_since: float = Field(
        default=0.0,
        description="When the turn started waiting on a person (0: it does not): the wait "
        "is given back to ``deadline_at`` when the last prompt is answered (SPEC H-03).",
    )
    faq_matches: list[FaqMatch] = Field(
        default_factory=list,
        description="SPEC C-04: FAQ entries the turn's searches found (quick-answer reads them).",
    )
    trace: TurnTrace | None = Field(default=None, description="Only when tracing is on.")
    usage: UsageMark | None = Field(
        default=None, description="Last request's usage; None again after a compaction."
    )
    metered: TurnUsage = Field(
        default_factory=TurnUsage,
        description="Tokens, model calls and tool calls of the turn so far (metering.py); "
        "reported on complete.",
    )
    token_scale: float = Field(default=1.0, description="Calibration of text (SPEC M-02).")
    scale_measured: bool = Field(
        default=False, description="token_scale was measured this turn: persist it at the end."
    )
    started_at: float = Field(description="Wall-clock start (epoch seconds).")
    deadline_at: float = Field(
        default=0.0,
        description="SPEC E-20: epoch seconds after which the next round ends the turn "
        "(0: none). Kept here, not derived from started_at, so that a wait that must not "
        "count (a human's approval) can push it back by the time it waited.",
    )
    version: int = 0

    def ids(self) -> dict[str, Any]:
        """Envelope fields that name the turn."""
        return {
            "tenant_id": self.tenant_id,
            "session_id": self.session_id,
            "request_id": self.request_id,
            "traceparent": self.traceparent,
            "credential": self.credential,
        }

    def all_results_in(self) -> bool:
        """Every call of the round has its result."""
        return all(c.call_id in self.results for c in self.pending)

    def dispatched_results_in(self) -> bool:
        """Every call dispatched so far has its result."""
        sent = {cid for group in self.groups[: self.dispatched_groups] for cid in group}
        return sent <= set(self.results)

    def tools_answered(self) -> bool:
        """The turn waits for tools and every dispatched call has answered: its next step
        can run."""
        return self.phase == "waiting" and self.dispatched_results_in()

    def call_sent_as(self, sent_id: str) -> PendingCall | None:
        """The round's call a worker answered, by the id it was sent under (its own, or
        the one a call run again after an uncertain outcome went out as, SPEC H-05)."""
        return next((c for c in self.pending if sent_id in (c.call_id, c.dispatch_id)), None)

    def waiting_on_person(self) -> bool:
        """A call of the round waits for a person's decision."""
        return any(a.status == "waiting" for a in self.approvals.values())

    def has_tool_results(self) -> bool:
        """Whether the turn gathered any tool output (rescue synthesis is possible)."""
        return any(step.tool_calls for step in self.steps) or bool(self.results)


# Compare-and-set: write only when the stored version is the one this replica read (else
# -1); then reserve ARGV[5] event seqs (maybe 0) on the turn's counter (KEYS[3]; `last` is
# the last one). The counter lives as long as the state: the first write creates it, and
# EventEmitter counts only on an existing one (a missing counter means a lost turn).
# With a holder (ARGV[6], '' for none) the seqs are reserved only past every published
# one (outbox.OUTBOX_GUARD on KEYS[4] box, KEYS[5] holder: else BUSY or ORPHANED), and
# the events, the last ARGV[5] arguments (one per reserved seq), are stored at their seqs,
# held for ARGV[7] ms.
_WRITE = (
    OUTBOX_GUARD
    + """
if ARGV[6] ~= '' then
  local held = outbox_guard(KEYS[4], KEYS[5], ARGV[6])
  if held ~= 0 then return held end
end
local current = redis.call('GET', KEYS[2])
if (current or '0') ~= ARGV[1] then return -1 end
redis.call('SET', KEYS[1], ARGV[3], 'EX', ARGV[4])
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[4])
local last = redis.call('INCRBY', KEYS[3], ARGV[5])
redis.call('EXPIRE', KEYS[3], ARGV[4])
if ARGV[6] ~= '' and tonumber(ARGV[5]) > 0 then
  local count = tonumber(ARGV[5])
  for i = 1, count do
    redis.call('HSET', KEYS[4], tostring(last - count + i), ARGV[#ARGV - count + i])
  end
  redis.call('EXPIRE', KEYS[4], ARGV[4])
  redis.call('SET', KEYS[5], ARGV[6], 'PX', ARGV[7])
end
"""
)

# _WRITE, then the optional tool-deadline change (KEYS[6], ARGV[8] member, ARGV[9] score or
# ''); returns `last`.
_CAS = (
    _WRITE
    + """
if KEYS[6] then
  if ARGV[9] == '' then redis.call('ZREM', KEYS[6], ARGV[8])
  else redis.call('ZADD', KEYS[6], ARGV[9], ARGV[8]) end
end
return last
"""
)

# _WRITE, then the step's lease (KEYS[6..8], ARGV[8..11] as TAKE_STEP_LEASE; KEYS[9] cancel
# flag, KEYS[10] steer inbox): {last, taken, stopped, steer messages waiting}.
_CAS_CLAIM = (
    TAKE_STEP_LEASE
    + _WRITE
    + """
if not take_step_lease(KEYS[6], KEYS[7], KEYS[8], ARGV[8], ARGV[9], ARGV[10], ARGV[11]) then
  return {last, 0, 0, 0}
end
return {last, 1, redis.call('EXISTS', KEYS[9]), redis.call('LLEN', KEYS[10])}
"""
)


# Put a lost turn's state back (KEYS[1] state, KEYS[2] version, KEYS[3] seq counter) unless
# one exists; its counter is raised to ARGV[4], the last seq Kafka holds: 1 if restored.
_RESTORE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
local current = tonumber(redis.call('GET', KEYS[3]) or '0')
if current < tonumber(ARGV[4]) then redis.call('SET', KEYS[3], ARGV[4], 'EX', ARGV[3]) end
redis.call('EXPIRE', KEYS[3], ARGV[3])
return 1
"""


class StaleTurnState(Exception):
    """Another replica advanced the turn since this one read it."""


class TurnStateLost(StaleTurnState):
    """The turn's stored state is gone (Redis emptied, keys evicted): the step stops, and
    the ``TurnAuditor`` ends the turn from what Kafka holds."""


class TurnStore:
    """Turn states in Redis, versioned so two replicas never both advance one turn."""

    def __init__(self, redis: Redis, ttl_s: int):
        self._redis = redis
        self._ttl = ttl_s
        self._cas = redis.register_script(_CAS)
        self._cas_claim = redis.register_script(_CAS_CLAIM)
        self._restore = redis.register_script(_RESTORE)

    @staticmethod
    def _keys(request_id: str) -> list[str]:
        return [state_key(request_id), version_key(request_id)]

    async def load(self, request_id: str) -> TurnState | None:
        """The stored state, or None when the turn is unknown or finished."""
        raw = await self._redis.get(self._keys(request_id)[0])
        # Fields an engine of a later version added are ignored (weft_contracts.compat):
        # replicas of two versions share turns during a rolling deploy.
        return TurnState.model_validate_json(raw, extra="ignore") if raw else None

    async def save(self, state: TurnState, *, deadline: DeadlineUpdate | None = None) -> TurnState:
        """Write ``state`` if nobody else did since it was read; return it with the new version.

        ``deadline`` (from ``TurnLeases.deadline``) is applied only with a successful write,
        in the same round trip: a round's Redis round trips are most of its cost.
        """
        saved, _ = await self.save_reserving(state, 0, deadline=deadline)
        return saved

    async def save_reserving(
        self,
        state: TurnState,
        seqs: int,
        *,
        deadline: DeadlineUpdate | None = None,
        outbox: OutboxWrite | None = None,
    ) -> tuple[TurnState, range]:
        """:meth:`save`, reserving ``seqs`` event sequence numbers of the turn (the
        ``EventEmitter``'s counter) in the same round trip; the saved state and the range.

        With ``outbox`` its events are stored at the reserved seqs until their holder has
        them acked, and the write waits for earlier seqs to be published: :class:`SeqsHeld`
        (the ``outbox`` module)."""
        new, keys, args, entries = self._write(state, seqs, outbox)
        if deadline is not None:
            keys.append(deadline.key)
            args += [deadline.request_id, "" if deadline.at_ms is None else str(deadline.at_ms)]
        last = int(await self._cas(keys=keys, args=[*args, *entries]))
        _check_written(state.request_id, last)
        return new, range(last - seqs + 1, last + 1)

    async def save_claiming(
        self, state: TurnState, seqs: int, lease: LeaseRequest, *, outbox: OutboxWrite | None = None
    ) -> tuple[TurnState, range, StepClaim | None]:
        """:meth:`save_reserving`, and in the same round trip take the step's lease
        (``TurnLeases.lease_request``) as ``TurnLeases.claim_step`` does: the write that
        records a round's last result starts the next step without another round trip.
        The claim is None when another replica holds the lease; the state is
        written either way."""
        new, keys, args, entries = self._write(state, seqs, outbox)
        read: Any = await self._cas_claim(
            keys=[*keys, *lease.keys], args=[*args, *lease.args, *entries]
        )
        if isinstance(read, int):
            _check_written(state.request_id, read)
        last, taken, stopped, waiting = (int(v) for v in read)
        claim = StepClaim(new.version, bool(stopped), bool(waiting)) if taken else None
        return new, range(last - seqs + 1, last + 1), claim

    def _write(
        self, state: TurnState, seqs: int, outbox: OutboxWrite | None
    ) -> tuple[TurnState, list[str], list[Any], list[str]]:
        """The state with its next version, _WRITE's keys and arguments, and the outbox
        entries (one per reserved seq), which go after the caller's own arguments."""
        new = state.model_copy(update={"version": state.version + 1})
        rid = state.request_id
        keys = [*self._keys(rid), seq_key(rid), outbox_key(rid), outbox_holder_key(rid)]
        holder, hold_ms, entries = ("", 0, []) if outbox is None else (
            outbox.holder, outbox.hold_ms, outbox.entries,
        )  # fmt: skip
        if outbox is not None and len(entries) != seqs:
            raise ValueError(f"{len(entries)} outbox entries for {seqs} reserved seqs")
        args: list[Any] = [
            state.version, new.version, new.model_dump_json(), self._ttl, seqs, holder, hold_ms,
        ]  # fmt: skip
        return new, keys, args, entries

    async def restore(self, state: TurnState, last_seq: int) -> bool:
        """Put back the state of a turn Redis lost (memory kept it while a person was
        asked, SPEC H-02), its event counter past ``last_seq``; False when a state exists."""
        rid = state.request_id
        keys = [*self._keys(rid), seq_key(rid)]
        args: list[Any] = [state.model_dump_json(), state.version, self._ttl, last_seq]
        return bool(await self._restore(keys=keys, args=args))

    async def delete(self, request_id: str) -> None:
        """Forget a finished turn, its parked images and takeover records too."""
        await self._redis.delete(
            *self._keys(request_id), images_key(request_id), acked_key(request_id),
            takeovers_key(request_id), outbox_key(request_id), outbox_holder_key(request_id),
        )  # fmt: skip


def _check_written(request_id: str, answer: int) -> None:
    """Raise for a write script's refusal: a stale version, or seqs held (``outbox``)."""
    if answer == -1:
        raise StaleTurnState(request_id)
    if answer in (BUSY, ORPHANED):
        raise SeqsHeld(request_id, answer)


class _Named(Protocol):
    @property
    def request_id(self) -> str: ...


_T = TypeVar("_T", bound=_Named)


async def without_trace(redis: Redis, turns: Sequence[_T]) -> list[_T]:
    """The turns (or requests) with neither a stored state nor a ``complete`` flag in
    Redis: lost with its data, or never opened."""
    if not turns:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for turn in turns:
            pipe.exists(state_key(turn.request_id), completed_key(turn.request_id))
        found = await pipe.execute()
    return [t for t, n in zip(turns, found, strict=True) if int(n) == 0]
