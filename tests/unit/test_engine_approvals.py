"""The engine's half of approvals without infrastructure (SPEC H-01..H-04): the policy at
dispatch, what a decision does to the turn, who may decide, and the suspended state."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from weft_contracts import (
    AgentConfig,
    ApprovalDecided,
    ApprovalDecidedData,
    ApprovalPolicy,
    Grant,
)
from weft_engine.act import (
    dispatch_groups,
    dispatch_messages,
    earliest_deadline,
    plan_calls,
    unacknowledged,
)
from weft_engine.approvals import (
    ApprovalGate,
    DecisionCheck,
    DecisionRefused,
    Review,
    arguments_digest,
    pack,
    settle,
    unpack,
)
from weft_engine.state import TurnState
from weft_llm import ToolCallRequest
from weft_platform.credentials import (
    RECORDS,
    TURN_AUDIENCE,
    CredentialSigner,
    CredentialVerifier,
    ensure_dev_keys,
    load_signer,
    load_verifier,
)
from weft_platform.runtime import DEV_ISSUERS

TOOLS = ["search_knowledge", "write_sandbox_file", "shell_exec", "web_fetch"]


def _state(level: str = "confirm", **policy: Any) -> TurnState:
    return TurnState(
        tenant_id="t", session_id="s", request_id="r", user_id="u",
        agent=AgentConfig(
            agent_id="a", model="m", allowed_tools=TOOLS,
            approval=ApprovalPolicy(access_level=level, **policy),
        ),
        messages=[{"role": "user", "content": "q"}],
        started_at=time.time(), deadline_at=time.time() + 600,
    )  # fmt: skip


def dev_signer(folder: Any, issuer: str) -> CredentialSigner:
    ensure_dev_keys(folder, DEV_ISSUERS)
    return load_signer(folder, issuer)


def dev_verifier(folder: Any) -> CredentialVerifier:
    ensure_dev_keys(folder, DEV_ISSUERS)
    return load_verifier(folder)


def _call(call_id: str, name: str, args: str = "{}") -> ToolCallRequest:
    return ToolCallRequest(id=call_id, name=name, arguments=args)


WRITE = '{"path": "notes.txt", "content": "hello"}'


class _Grants:
    def __init__(self, grants: list[Grant] | None = None, fail: bool = False) -> None:
        self.grants = grants or []
        self.fail = fail
        self.reads = 0

    async def live_grants(self, state: TurnState) -> list[Grant]:
        self.reads += 1
        if self.fail:
            raise ConnectionError("memory down")
        return self.grants


async def _review(
    state: TurnState, calls: list[ToolCallRequest], grants: _Grants | None = None
) -> tuple[TurnState, Review]:
    pending, errors = plan_calls(state, calls, 60)
    review = await ApprovalGate(grants or _Grants()).review(state, pending, errors)
    groups = dispatch_groups(pending)
    state = review.state.model_copy(update={"pending": pending, "groups": groups})
    return state, review


async def test_confirm_asks_for_writes_and_lets_reads_run() -> None:  # SPEC H-01
    grants = _Grants()
    state, review = await _review(
        _state("confirm"), [_call("r1", "search_knowledge", '{"query": "x"}'),
                            _call("w1", "write_sandbox_file", WRITE)], grants,
    )  # fmt: skip
    assert review.denied == {}
    assert [p.call_id for p in review.prompts] == ["w1"]
    prompt = review.prompts[0]
    assert prompt.risk == "write" and prompt.tool_name == "write_sandbox_file"
    assert prompt.arguments_digest == arguments_digest({"path": "notes.txt", "content": "hello"})
    assert prompt.expires_at.timestamp() == pytest.approx(time.time() + 600, abs=5)
    assert grants.reads == 1, "a call that asks reads the session's grants once"
    assert state.waiting_on_person() and state.person_wait_since > 0
    # The read goes out, the write waits unsent; nothing wakes the turn but a decision
    # once the read answered.
    _, messages = dispatch_messages(state, ["r1", "w1"])
    assert [m.data.call_id for m in messages] == ["r1"]
    assert earliest_deadline(state) is None


async def test_read_only_denies_writes_with_a_result_the_model_reads() -> None:  # SPEC H-01
    _, review = await _review(_state("read_only"), [_call("w1", "shell_exec", '{"command": "ls"}')])
    assert review.prompts == []
    assert "read_only" in review.denied["w1"] and "shell_exec" in review.denied["w1"]


async def test_auto_write_runs_writes_and_asks_for_always_ask_tools() -> None:  # SPEC H-01
    grants = _Grants()
    state = _state("auto_write", always_ask=["web_fetch"])
    _, review = await _review(
        state, [_call("w1", "write_sandbox_file", WRITE),
                _call("p1", "web_fetch", '{"items": [{"url": "https://example.com"}]}')], grants,
    )  # fmt: skip
    assert [p.call_id for p in review.prompts] == ["p1"] and review.prompts[0].always_ask
    assert grants.reads == 0, "no grant can spare an always-ask tool: none is read"


def _grant(**changes: Any) -> Grant:
    now = datetime.now(UTC)
    fields: dict[str, Any] = dict(
        grant_id="g", tenant_id="t", user_id="u", scope="session", session_id="s",
        agent_id="a", operations=["write_sandbox_file"], created_at=now,
        expires_at=now + timedelta(hours=1),
    )  # fmt: skip
    return Grant.model_validate({**fields, **changes})


async def test_a_session_grant_spares_the_question_but_never_a_denial() -> None:  # SPEC H-04
    _, review = await _review(
        _state("confirm"), [_call("w1", "write_sandbox_file", WRITE)], _Grants([_grant()])
    )
    assert review.prompts == [] and review.denied == {}
    _, denied = await _review(
        _state("read_only"), [_call("w1", "write_sandbox_file", WRITE)], _Grants([_grant()])
    )
    assert "w1" in denied.denied
    _, other = await _review(
        _state("confirm"), [_call("w1", "write_sandbox_file", WRITE)],
        _Grants([_grant(session_id="another")]),
    )  # fmt: skip
    assert [p.call_id for p in other.prompts] == ["w1"]


async def test_memory_down_means_asking_never_allowing() -> None:  # SPEC H-04
    _, review = await _review(
        _state("confirm"), [_call("w1", "write_sandbox_file", WRITE)], _Grants(fail=True)
    )
    assert [p.call_id for p in review.prompts] == ["w1"]


def _decided(state: TurnState, decision: str, **data: Any) -> ApprovalDecided:
    call_id = next(iter(state.approvals))
    return ApprovalDecided(
        tenant_id="t", session_id="s", request_id="r",
        data=ApprovalDecidedData(
            prompt_id=state.approvals[call_id].prompt_id, call_id=call_id, decision=decision,
            decided_by="u", decided_at=datetime.now(UTC), **data,
        ),
    )  # fmt: skip


async def test_deny_records_an_error_result_and_gives_the_wait_back() -> None:  # SPEC H-03
    state, _ = await _review(_state("confirm"), [_call("w1", "write_sandbox_file", WRITE)])
    state = state.model_copy(update={"person_wait_since": time.time() - 100})
    settled = settle(state, _decided(state, "deny", reason="not now"), time.time())
    assert settled.result is not None and "denied" in (settled.result.error or "")
    assert "not now" in (settled.result.error or "")
    assert settled.resolved.outcome == "denied"
    assert settled.state.results["w1"] == settled.result
    assert settled.state.deadline_at == pytest.approx(state.deadline_at + 100, abs=2)
    assert not settled.state.waiting_on_person()


async def test_timeout_and_cancel_come_back_as_results() -> None:  # SPEC H-03
    state, _ = await _review(_state("confirm"), [_call("w1", "write_sandbox_file", WRITE)])
    timeout = settle(state, _decided(state, "timeout"), time.time())
    assert timeout.resolved.outcome == "timeout" and "10 minutes" in (timeout.result.error or "")  # type: ignore[union-attr]
    cancel = settle(state, _decided(state, "cancel"), time.time())
    assert cancel.resolved.outcome == "cancelled" and cancel.result is not None


async def test_approve_with_edited_arguments_validated_again() -> None:  # SPEC H-02
    state, _ = await _review(_state("confirm"), [_call("w1", "write_sandbox_file", WRITE)])
    edited = {"path": "other.txt", "content": "bye"}
    ok = settle(state, _decided(state, "approve", arguments=edited), time.time())
    assert ok.result is None and ok.resolved.edited and ok.resolved.outcome == "approved"
    assert ok.state.pending[0].arguments == edited
    _, messages = dispatch_messages(ok.state, ["w1"])
    assert messages[0].data.arguments == edited, "the call runs with what was approved"
    bad = settle(state, _decided(state, "approve", arguments={"path": 3}), time.time())
    assert bad.result is not None and "not valid" in (bad.result.error or "")
    assert bad.resolved.outcome == "denied"


async def test_a_takeover_never_reports_a_waiting_call_as_uncertain() -> None:  # SPEC H-05
    state, _ = await _review(_state("confirm"), [_call("w1", "write_sandbox_file", WRITE)])
    state = state.model_copy(update={"dispatched_groups": 1})
    assert unacknowledged(state, None) == []
    approved = settle(state, _decided(state, "approve"), time.time()).state
    pending, _ = dispatch_messages(approved, ["w1"])
    sent = approved.model_copy(update={"pending": pending})
    assert [c.call_id for c in unacknowledged(sent, None)] == ["w1"], (
        "approved and sent, but its sending not recorded: a takeover must settle it"
    )


def test_only_memory_may_expire_and_only_a_person_may_decide(tmp_path: Any) -> None:  # H-02
    verifier = dev_verifier(tmp_path)
    check = DecisionCheck(verifier)
    memory = dev_signer(tmp_path, "memory").service(RECORDS, ["records:weft.agent.control.v1"])
    engine = dev_signer(tmp_path, "engine").service(RECORDS, ["records:weft.agent.control.v1"])
    person = dev_signer(tmp_path, "gateway").request(
        tenant_id="t", user_id="u", session_id="s", request_id="r", audience=TURN_AUDIENCE,
        ttl_s=60,
    )  # fmt: skip
    state, _ = _sync_review()

    def decided(decision: str, credential: str) -> ApprovalDecided:
        return _decided(state, decision).model_copy(update={"credential": credential})

    check.authority(decided("timeout", memory))
    check.authority(decided("approve", person))
    for decision, credential in [("timeout", person), ("approve", memory), ("timeout", engine)]:
        with pytest.raises(DecisionRefused):
            check.authority(decided(decision, credential))


def test_the_turn_takes_only_a_credential_for_itself(tmp_path: Any) -> None:  # SPEC H-02
    check = DecisionCheck(dev_verifier(tmp_path))
    gateway = dev_signer(tmp_path, "gateway")
    state, _ = _sync_review()

    def brought(request_id: str) -> str | None:
        token = gateway.request(
            tenant_id="t", user_id="u", session_id="s", request_id=request_id,
            audience=TURN_AUDIENCE, ttl_s=60,
        )  # fmt: skip
        decided = _decided(state, "approve", turn_credential=token)
        return check.turn_credential(decided, state)

    assert brought("r") is not None
    assert brought("another-turn") is None


def _sync_review() -> tuple[TurnState, Review]:
    return asyncio.run(_review(_state("confirm"), [_call("w1", "write_sandbox_file", WRITE)]))


def test_a_suspended_state_round_trips() -> None:  # SPEC H-02
    state, _ = _sync_review()
    assert unpack(pack(state)) == state
