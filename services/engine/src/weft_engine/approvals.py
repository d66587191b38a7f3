"""Approvals in the engine (SPEC H-01..H-04): the policy at dispatch, and decisions.

``ApprovalGate.review`` runs when a round's calls are planned: each call is allowed, denied
(an error result the model reads, never sent) or asked about (``weft_contracts.decide``).
An asked call gets a prompt (``tool_approval_required``) and stays unsent: its dispatch
group counts as sent without a result, so the round waits (later groups too, E-15's order
is kept: a later call may depend on it), and the turn holds nothing while it waits: no
step, no lease, no tool deadline (``act._earliest_deadline``).

``ApprovalDesk.on_decision`` applies an ``ApprovalDecided`` from ``agent.control``: a
person's decision (through the gateway) or an expiry (memory's timer). Approve sends the
call (edited arguments validated again); deny, timeout and cancel record an error result
and the round goes on. Each decision is applied once: one for a prompt already settled is
ignored, and one that finds the call approved but not yet known sent sends it again with
the same call id (a worker takes a write it saw for a redelivery, never runs it twice).
The wait is given back to the turn's wall-clock bound, and the turn continues with the
fresh credential the decision brings.

While a person is asked, the turn's state is also kept by memory (``Suspensions``), so
that a Redis that lost it does not lose the wait: a decision for a turn Redis no longer
knows restores it from there first (the ``TurnAuditor`` does the same for a turn it finds
without state).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import astuple, dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from ulid import ULID
from weft_contracts import (
    AUTHORIZATION_KEY,
    OUTCOME_UNKNOWN,
    ApprovalDecided,
    Grant,
    McpAuthorizationRequired,
    RiskClass,
    ToolApprovalRequiredData,
    ToolApprovalResolvedData,
    ToolCallCompletedData,
    Topic,
    decide,
    grant_covers,
)
from weft_platform.credentials import RECORDS, CredentialRejected, CredentialVerifier
from weft_platform.record_credentials import record_scope
from weft_tool_catalog.specs import argument_problems

from weft_engine.masking import masked_arguments
from weft_engine.state import CallApproval, PendingCall, StaleTurnState, TurnState, TurnStore
from weft_engine.trails import TurnTrails
from weft_engine.turn_tools import marks as call_marks

log = structlog.get_logger(__name__)

MEMORY_ISSUER = "memory"
"""The only service whose credential may carry an expiry (``decision`` ``timeout``)."""

DENIED_BY_POLICY = (
    "{tool} was not run: this agent's access level ({level}) does not allow {risk} tools. "
    "Do not call it again; go on without it, or tell the user what you would have done."
)
DENIED = (
    "{tool} was not run: the person asked to approve it denied it{reason}. Do not call it "
    "again in this turn unless the user asks; go on without it."
)
TIMED_OUT = (
    "{tool} was not run: nobody approved it within {minutes}. Go on without it, or tell the "
    "user it needs their approval."
)
CANCELLED = "{tool} was not run: its approval request was withdrawn. Go on without it."
UNCERTAIN = (
    "{tool} may or may not have run before a failure: run it again, or skip it? "
    "Check its effect before running it again."
)
SKIPPED = OUTCOME_UNKNOWN + "; it was not run again ({why})."
AUTHORIZE = (
    "{tool} needs your authorisation to use {server}: open the link to sign in there; the "
    "call runs once you have."
)
NOT_AUTHORIZED = (
    "{tool} was not run: {server} was not authorised by the user ({why}). Go on without it, "
    "or tell the user it needs their authorisation."
)
INVALID_EDIT = "{tool} was not run: the arguments approved for it are not valid: {error}"

ASK_REASONS = {
    "always": "{tool} is always asked about before it runs.",
    "confirm": "This agent asks before any {risk} tool runs ({tool}).",
    "destructive": "{tool} is destructive: it asks before it runs.",
}


def arguments_digest(arguments: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a call's arguments: names what a person approves."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class GrantSource(Protocol):
    """Where the engine reads a session's grants (memory)."""

    async def live_grants(self, state: TurnState) -> list[Grant]: ...


@dataclass(frozen=True)
class Review:
    """What the policy made of a round's calls."""

    state: TurnState
    """With the grants it read, and the round's prompts in ``approvals``."""
    denied: dict[str, str]
    """Error results of denied calls, by call id."""
    prompts: list[ToolApprovalRequiredData]


class ApprovalGate:
    """SPEC H-01 at dispatch time."""

    def __init__(self, grants: GrantSource):
        self._grants = grants

    async def review(
        self, state: TurnState, pending: list[PendingCall], errors: dict[str, str]
    ) -> Review:
        """Decide each call of the round that has no error yet (``errors``: A-08, E-16)."""
        policy = state.agent.approval
        level = policy.access_level
        calls = [c for c in pending if c.call_id not in errors]
        marks = {
            c.call_id: astuple(call_marks(c.tool_name, c.arguments, state.mcp_tools,
                                          policy.always_ask))
            for c in calls
        }  # fmt: skip
        plain = {
            cid: decide(risk, level, always_ask=always) for cid, (risk, always) in marks.items()
        }
        if state.grants is None and any(
            v == "ask" and not marks[cid][1] for cid, v in plain.items()
        ):
            state = state.model_copy(update={"grants": await self._read_grants(state)})
        now = time.time()
        denied: dict[str, str] = {}
        asked: dict[str, CallApproval] = {}
        prompts: list[ToolApprovalRequiredData] = []
        for call in calls:
            risk, always = marks[call.call_id]
            granted = any(
                grant_covers(g, call.tool_name, session_id=state.session_id,
                             agent_id=state.agent.agent_id, at=now, arguments=call.arguments)
                for g in state.grants or []
            )  # fmt: skip
            verdict = decide(risk, level, always_ask=always, granted=granted)
            if verdict == "deny":
                denied[call.call_id] = DENIED_BY_POLICY.format(
                    tool=call.tool_name, level=level, risk=risk
                )
            elif verdict == "ask":
                approval = CallApproval(
                    prompt_id=str(ULID()), asked_at=now, expires_at=now + policy.timeout_s
                )
                asked[call.call_id] = approval
                why = "always" if always else "confirm" if level == "confirm" else "destructive"
                prompts.append(
                    _prompt(state, call, approval, risk=risk, always=always,
                            reason=ASK_REASONS[why].format(tool=call.tool_name, risk=risk))
                )  # fmt: skip
        if asked:
            since = state.person_wait_since or now
            state = state.model_copy(update={"approvals": asked, "person_wait_since": since})
        elif state.approvals:
            state = state.model_copy(update={"approvals": {}})
        return Review(state, denied, prompts)

    async def _read_grants(self, state: TurnState) -> list[Grant]:
        """The session's grants; none when memory cannot say (the safe side: it asks)."""
        try:
            return await self._grants.live_grants(state)
        except Exception as exc:  # an unreachable memory means "ask", never "allow"
            log.warning("grants_unavailable", request_id=state.request_id, error=str(exc))
            return []


def _prompt(
    state: TurnState,
    call: PendingCall,
    approval: CallApproval,
    *,
    risk: RiskClass,
    always: bool,
    reason: str,
    authorization_url: str | None = None,
) -> ToolApprovalRequiredData:
    policy = state.agent.approval
    return ToolApprovalRequiredData(
        prompt_id=approval.prompt_id,
        kind=approval.kind,
        round=state.round,
        call_id=call.call_id,
        tool_name=call.tool_name,
        risk=risk,
        always_ask=always,
        arguments=masked_arguments(call.tool_name, call.arguments),
        arguments_digest=arguments_digest(call.arguments),
        reason=reason,
        agent_id=state.agent.agent_id,
        user_id=state.user_id,
        expires_at=_utc(approval.expires_at),
        timeout_s=policy.timeout_s,
        on_timeout=policy.on_timeout,
        approver_group=policy.approver_group,
        escalation_timeout_s=policy.escalation_timeout_s,
        authorization_url=authorization_url,
    )


def ask_uncertain(
    state: TurnState, calls: list[PendingCall], now: float
) -> tuple[TurnState, list[ToolApprovalRequiredData]]:
    """SPEC H-05: ask a person about writes whose outcome is unknown ("this may have run:
    run again, or skip?") instead of replaying them or answering the model "unknown"."""
    if not calls:
        return state, []
    timeout = state.agent.approval.timeout_s
    approvals = dict(state.approvals)
    prompts = []
    for call in calls:
        approval = CallApproval(
            prompt_id=str(ULID()), kind="uncertain_outcome", asked_at=now,
            expires_at=now + timeout,
        )  # fmt: skip
        approvals[call.call_id] = approval
        reason = UNCERTAIN.format(tool=call.tool_name)
        risk = call_marks(call.tool_name, call.arguments, state.mcp_tools, ()).risk
        prompts.append(_prompt(state, call, approval, risk=risk, always=False, reason=reason))
    asked = {c.call_id for c in calls}
    pending = [  # nothing waits for a worker any more: only for the person
        c.model_copy(update={"deadline": 0.0}) if c.call_id in asked else c for c in state.pending
    ]
    since = state.person_wait_since or now
    update = {"approvals": approvals, "pending": pending, "person_wait_since": since}
    return state.model_copy(update=update), prompts


def ask_authorization(
    state: TurnState, call: PendingCall, needed: McpAuthorizationRequired, now: float
) -> tuple[TurnState, list[ToolApprovalRequiredData]]:
    """SPEC H-06: the MCP server the call reached wants the user's OAuth consent. The call
    waits for it like an approval (its prompt carries the authorisation URL), for the
    agent's ``mcp_auth_wait_s``; once the gateway hears the authorisation completed it
    approves the prompt and the call is sent again (``settle``)."""
    wait = state.agent.mcp_auth_wait_s
    approval = CallApproval(
        prompt_id=str(ULID()),
        kind="mcp_authorization",
        asked_at=now,
        expires_at=now + wait,
        server_name=needed.server_name,
    )
    reason = AUTHORIZE.format(server=needed.server_name, tool=call.tool_name)
    risk = call_marks(call.tool_name, call.arguments, state.mcp_tools, ()).risk
    prompt = _prompt(state, call, approval, risk=risk, always=False, reason=reason,
                     authorization_url=needed.authorization_url)  # fmt: skip
    prompt = prompt.model_copy(update={"timeout_s": wait, "on_timeout": "deny"})
    pending = [
        c.model_copy(update={"deadline": 0.0}) if c.call_id == call.call_id else c
        for c in state.pending
    ]  # nothing waits for a worker: only for the user
    update = {
        "approvals": {**state.approvals, call.call_id: approval},
        "pending": pending,
        "person_wait_since": state.person_wait_since or now,
    }
    return state.model_copy(update=update), [prompt]


def authorization_needed(data: ToolCallCompletedData) -> McpAuthorizationRequired | None:
    """The authorisation a failed MCP call asks for, if that is why it failed."""
    raw = None if data.success else data.data.get(AUTHORIZATION_KEY)
    if raw is None:
        return None
    try:
        return McpAuthorizationRequired.model_validate(raw)
    except ValueError:
        log.warning("mcp_authorization_invalid", call_id=data.call_id)
        return None


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


# --- decisions ---------------------------------------------------------------------------


class DecisionRefused(Exception):
    """A decision whose credential does not allow it (dead-lettered by the consumer)."""


@dataclass(frozen=True)
class Settled:
    """What one decision does to the turn (``settle``)."""

    state: TurnState
    """The turn with the decision applied (not saved)."""
    resolved: ToolApprovalResolvedData
    result: ToolCallCompletedData | None
    """The call's error result (deny, timeout, cancel, invalid edit); None: approved."""


def settle(state: TurnState, decided: ApprovalDecided, now: float) -> Settled:
    """Apply a decision to the waiting call it names (the caller checked it waits)."""
    data = decided.data
    call = next(c for c in state.pending if c.call_id == data.call_id)
    approval = state.approvals[data.call_id]
    outcome: Any = {"approve": "approved", "deny": "denied", "cancel": "cancelled"}.get(
        data.decision, data.decision
    )
    result: ToolCallCompletedData | None = None
    edited = False
    pending = state.pending
    if data.decision == "approve" and approval.kind != "approval":
        # Run again under a new id: after an unknown outcome (H-05) a worker would take
        # the old id for a redelivery; after an authorisation (H-06) the worker's claim
        # on the old id holds its "authorisation required" answer.
        mark = "again" if approval.kind == "uncertain_outcome" else "auth"
        again = f"{call.call_id}~{mark}.{approval.prompt_id[-8:].lower()}"
        changed = call.model_copy(update={"dispatch_id": again})  # a new id runs again
        pending = [changed if c.call_id == call.call_id else c for c in state.pending]
    elif data.decision == "approve" and data.arguments is not None:
        error = argument_problems(call.tool_name, data.arguments)
        if error is None:
            edited = data.arguments != call.arguments
            changed = call.model_copy(
                update={"arguments": data.arguments,
                        "arguments_json": json.dumps(data.arguments, ensure_ascii=False)}
            )  # fmt: skip
            pending = [changed if c.call_id == call.call_id else c for c in state.pending]
        else:
            outcome = "denied"
            result = _failed(call, INVALID_EDIT.format(tool=call.tool_name, error=error))
    elif data.decision != "approve" and approval.kind == "uncertain_outcome":
        result = _failed(call, SKIPPED.format(why=_why(data.decision, data.reason)))
    elif data.decision != "approve" and approval.kind == "mcp_authorization":
        why = {"timeout": "nobody authorised it in time", "cancel": "the request was withdrawn"}
        server = approval.server_name or "the MCP server"
        reason = why.get(data.decision) or (data.reason.strip()[:500] or "it was refused")
        result = _failed(call, NOT_AUTHORIZED.format(tool=call.tool_name, server=server,
                                                     why=reason))  # fmt: skip
    elif data.decision != "approve":
        result = _failed(call, _refusal(call.tool_name, data.decision, data.reason, state))
    status = "settled" if result is not None else "approved"
    approvals = {**state.approvals, data.call_id: approval.model_copy(update={"status": status})}
    update: dict[str, Any] = {"approvals": approvals, "pending": pending}
    if result is not None:
        update["results"] = {**state.results, data.call_id: result}
    if not any(a.status == "waiting" for a in approvals.values()) and state.person_wait_since:
        # SPEC H-03: the wait does not count against the turn's bound.
        waited = max(0.0, now - state.person_wait_since)
        update["person_wait_since"] = 0.0
        if state.deadline_at:
            update["deadline_at"] = state.deadline_at + waited
    if data.remember != "call":
        update["grants"] = None  # memory wrote a grant: read them again before asking
    resolved = ToolApprovalResolvedData(
        prompt_id=approval.prompt_id, call_id=call.call_id, tool_name=call.tool_name,
        outcome=outcome, edited=edited, decided_by=data.decided_by, reason=data.reason,
        remember=data.remember,
    )  # fmt: skip
    return Settled(state.model_copy(update=update), resolved, result)


def _refusal(tool: str, decision: str, reason: str, state: TurnState) -> str:
    if decision == "timeout":
        minutes = max(1, round(state.agent.approval.timeout_s / 60))
        return TIMED_OUT.format(
            tool=tool, minutes=f"{minutes} minute" + ("s" if minutes > 1 else "")
        )
    if decision == "cancel":
        return CANCELLED.format(tool=tool)
    said = f" ({reason.strip()[:500]})" if reason.strip() else ""
    return DENIED.format(tool=tool, reason=said)


def _why(decision: str, reason: str) -> str:
    if decision == "timeout":
        return "nobody decided in time"
    said = f": {reason.strip()[:500]}" if reason.strip() else ""
    return (
        f"a person chose to skip it{said}" if decision == "deny" else "its question was withdrawn"
    )


def _failed(call: PendingCall, error: str) -> ToolCallCompletedData:
    return ToolCallCompletedData(
        call_id=call.call_id, tool_name=call.tool_name, success=False, error=error
    )


class DecisionCheck:
    """Who may decide (invariant 5; the consumer's ``RecordCheck`` has already verified the
    envelope's credential for the record's tenant and session)."""

    def __init__(self, verifier: CredentialVerifier):
        self._verifier = verifier

    def authority(self, decided: ApprovalDecided) -> None:
        """An expiry only from memory's service credential; a person's decision only with
        a request credential (the gateway signed it after checking who decides)."""
        token = decided.credential or ""
        service = self._verifier.kind(token) == "service"
        at = decided.time.timestamp()
        try:
            if service:
                self._verifier.verify_service(
                    token, RECORDS, record_scope(Topic.AGENT_CONTROL),
                    issuers=frozenset({MEMORY_ISSUER}), at=at,
                )  # fmt: skip
        except CredentialRejected as exc:
            raise DecisionRefused(exc.reason) from exc
        if service != (decided.data.decision == "timeout"):
            raise DecisionRefused(f"a {decided.data.decision} decision with the wrong credential")

    def turn_credential(self, decided: ApprovalDecided, state: TurnState) -> str | None:
        """The fresh credential the decision brings for the turn, when it is one for this
        very turn (None: keep the turn's own)."""
        token = decided.data.turn_credential
        if not token:
            return None
        try:
            cred = self._verifier.verify_request(token, RECORDS)
        except CredentialRejected as exc:
            log.warning("turn_credential_refused", request_id=state.request_id, reason=exc.reason)
            return None
        same = (cred.tenant_id, cred.session_id, cred.request_id) == (
            state.tenant_id, state.session_id, state.request_id,
        )  # fmt: skip
        if not same:
            log.warning("turn_credential_for_another_turn", request_id=state.request_id)
            return None
        return token


# --- suspensions (memory keeps a waiting turn's state) -----------------------------------


class SuspensionStore(Protocol):
    """memory's ``/internal/turns/{request_id}/suspension``."""

    async def put_suspension(self, state: TurnState, blob: str) -> None: ...

    async def get_suspension(
        self, request_id: str, credential: str | None
    ) -> tuple[int, str] | None: ...

    async def delete_suspension(self, state: TurnState) -> None: ...


def pack(state: TurnState) -> str:
    """A turn state as memory stores it (zlib-compressed JSON, base64)."""
    return base64.b64encode(zlib.compress(state.model_dump_json().encode(), 6)).decode()


def unpack(blob: str) -> TurnState:
    """:func:`pack`'s inverse (fields of a later engine version are ignored)."""
    raw = zlib.decompress(base64.b64decode(blob))
    return TurnState.model_validate_json(raw, extra="ignore")


class Suspensions:
    """Keeps the state of a turn that waits for a person in memory (best effort: a failure
    is logged; the turn itself goes on from Redis)."""

    def __init__(self, store: SuspensionStore):
        self._store = store

    async def keep(self, state: TurnState) -> None:
        """Store ``state`` while a person is asked; forget it once nobody is."""
        try:
            if state.waiting_on_person():
                await self._store.put_suspension(state, pack(state))
            elif state.approvals:
                await self._store.delete_suspension(state)
        except Exception as exc:
            log.warning("suspension_not_kept", request_id=state.request_id, error=str(exc))

    async def fetch(self, request_id: str, credential: str | None) -> TurnState | None:
        """The suspended state memory holds for the turn, or None."""
        found = await self._store.get_suspension(request_id, credential)
        if found is None:
            return None
        version, blob = found
        state = unpack(blob)
        return state.model_copy(update={"version": version}) if state.version != version else state


Restorer = Callable[[str, str | None], Awaitable[TurnState | None]]
"""Puts a turn Redis lost back from memory's suspension (request id, a credential for the
turn): the restored state, or None when there is none to restore."""


class ApprovalDesk:
    """Applies decisions (see the module docstring)."""

    def __init__(
        self,
        *,
        load: Callable[[str], Awaitable[TurnState | None]],
        restore: Restorer,
        apply: Callable[[Settled, str | None], Awaitable[TurnState]],
        resend: Callable[[TurnState, str], Awaitable[TurnState]],
        after: Callable[[TurnState], Awaitable[None]],
        check: DecisionCheck,
        attempts: int = 5,
    ):
        """``apply`` saves a settled decision and sends an approved call (``ToolRound``);
        ``resend`` sends an approved call again; ``after`` follows a saved decision (the
        next step when the round is answered, the suspension kept)."""
        self._load = load
        self._restore = restore
        self._apply = apply
        self._resend = resend
        self._after = after
        self._check = check
        self._attempts = attempts

    async def on_decision(self, decided: ApprovalDecided) -> None:
        """Apply ``decided`` once (see the module docstring)."""
        self._check.authority(decided)
        rid, data = decided.request_id, decided.data
        for _ in range(self._attempts):
            state = await self._load(rid)
            if state is None:
                state = await self._restore(rid, data.turn_credential)
            if state is None:
                log.info("decision_without_turn", request_id=rid, prompt_id=data.prompt_id)
                return
            approval = state.approvals.get(data.call_id)
            if approval is None or approval.prompt_id != data.prompt_id:
                log.info("decision_for_no_prompt", request_id=rid, prompt_id=data.prompt_id)
                return
            if approval.status == "approved" and data.call_id not in state.results:
                await self._resend(state, data.call_id)  # saved, maybe never sent
                return
            if approval.status != "waiting":
                return  # applied already: a redelivery or a second decision
            settled = settle(state, decided, time.time())
            try:
                saved = await self._apply(settled, self._check.turn_credential(decided, state))
            except StaleTurnState:
                continue
            await self._after(saved)
            log.info("approval_decided", request_id=rid, prompt_id=data.prompt_id,
                     outcome=settled.resolved.outcome, by=data.decided_by)  # fmt: skip
            return
        raise StaleTurnState(rid)


@dataclass(frozen=True)
class _Ref:
    session_id: str
    request_id: str
    started_at: datetime


class SuspendedTurns:
    """Puts back a waiting turn that Redis lost, from memory's copy (``Restorer``)."""

    def __init__(
        self,
        *,
        store: TurnStore,
        suspensions: Suspensions,
        trails: TurnTrails,
        claim_session: Callable[[TurnState], Awaitable[None]],
        wake_at: Callable[[TurnState], Awaitable[None]],
        service_credential: Callable[[], str | None],
    ):
        """``trails``: the turn's last seq in Kafka and whether it completed;
        ``claim_session`` makes the turn its session's running
        one again; ``wake_at`` puts back the deadline of calls still out."""
        self._store = store
        self._suspensions = suspensions
        self._trails = trails
        self._claim_session = claim_session
        self._wake_at = wake_at
        self._service_credential = service_credential

    async def restore(self, request_id: str, credential: str | None) -> TurnState | None:
        """The restored state, or None when memory keeps none or the turn completed."""
        try:
            state = await self._suspensions.fetch(
                request_id, credential or self._service_credential()
            )
        except Exception as exc:
            log.warning("suspension_unavailable", request_id=request_id, error=str(exc))
            return None
        if state is None:
            return None
        ref = _Ref(state.session_id, request_id, _utc(state.started_at))
        trail = (await self._trails.read([ref])).get(request_id)
        if trail is None or trail.completed or trail.last_seq == 0:
            return None
        if await self._store.restore(state, trail.last_seq):
            await self._claim_session(state)
            await self._wake_at(state)
            log.warning("turn_restored_from_suspension", request_id=request_id,
                        last_seq=trail.last_seq, version=state.version)  # fmt: skip
        return await self._store.load(request_id)
