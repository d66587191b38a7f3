"""Write-call claims (invariant 3) name a call within its tenant and turn: a redelivery of
one call is reported, never run twice, while another turn's call that the model gave the
same id (providers may count ``call_0``, ``call_1``... in every turn) runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fakeredis import FakeAsyncRedis
from weft_contracts import ToolCallRequested, ToolCallRequestedData, ToolContext
from weft_tool_exec.ledger import CallLedger, Claim


def _call(tenant: str, turn: str, call_id: str = "call_0") -> ToolCallRequested:
    return ToolCallRequested(
        tenant_id=tenant, session_id="s", request_id=turn,
        data=ToolCallRequestedData(
            call_id=call_id, tool_name="write_memory", arguments={}, round=0,
            deadline=datetime.now(UTC) + timedelta(seconds=60),
            context=ToolContext(user_id="u", agent_id="a"),
        ),
    )  # fmt: skip


async def test_a_call_id_is_claimed_once_per_turn_and_tenant() -> None:
    ledger = CallLedger(FakeAsyncRedis(), "unit.")
    first = _call("t1", "req-1")
    assert await ledger.claim(first, "w1") is Claim.RUN
    assert await ledger.claim(first, "w2") is Claim.UNKNOWN  # redelivered mid-run
    await ledger.finish(first)
    assert await ledger.claim(_call("t1", "req-1"), "w2") is Claim.DONE  # redelivered after
    assert await ledger.claim(_call("t1", "req-2"), "w1") is Claim.RUN  # next turn, same id
    assert await ledger.claim(_call("t2", "req-1"), "w1") is Claim.RUN  # another tenant
