"""The engine's half of MCP without infrastructure (SPEC T-19, T-01, A-08, H-01, H-06):
which tools a turn offers, how described tools are published, the risk of MCP calls, and
the authorisation prompt with what its decision does."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from weft_contracts import (
    AUTHORIZATION_KEY,
    PUBLISHED_KEY,
    AgentConfig,
    ApprovalDecided,
    ApprovalDecidedData,
    ApprovalPolicy,
    McpAuthorizationRequired,
    McpServerRef,
    McpToolDef,
    ToolCallCompletedData,
    dynamic_tool_name,
)
from weft_engine.act import dispatch_groups, dispatch_messages, plan_calls
from weft_engine.approvals import ApprovalGate, ask_authorization, authorization_needed, settle
from weft_engine.observe import observe
from weft_engine.state import TurnState
from weft_engine.turn_tools import MCP_TOOLS, definitions, marks, offered_names, publish
from weft_llm import ToolCallRequest

SERVER = McpServerRef(id="srv1", name="github")


def _agent(servers: list[McpServerRef] | None = None, level: str = "auto_write") -> AgentConfig:
    return AgentConfig(
        agent_id="a", model="m", allowed_tools=["thinking", "call_mcp_tool"],
        mcp_servers=[SERVER] if servers is None else servers,
        approval=ApprovalPolicy(access_level=level),
    )  # fmt: skip


def _state(agent: AgentConfig | None = None, **update: Any) -> TurnState:
    return TurnState(
        tenant_id="t", session_id="s", request_id="r", user_id="u", agent=agent or _agent(),
        messages=[{"role": "user", "content": "q"}], started_at=time.time(),
        deadline_at=time.time() + 600, **update,
    )  # fmt: skip


def _tool(tool_name: str = "create_issue", server: McpServerRef = SERVER, **kw: Any) -> McpToolDef:
    return McpToolDef(
        name=dynamic_tool_name(server.id, server.name, tool_name), server_id=server.id,
        server_name=server.name, tool_name=tool_name, description="Create an issue.",
        parameters={"type": "object", "properties": {"title": {"type": "string"}}}, **kw,
    )  # fmt: skip


def _described(*tools: McpToolDef, success: bool = True) -> ToolCallCompletedData:
    return ToolCallCompletedData(
        call_id="d1", tool_name="discover_mcp_tools", success=success, output="{}",
        data={PUBLISHED_KEY: [t.model_dump(mode="json") for t in tools]},
    )  # fmt: skip


def test_mcp_tools_follow_the_servers_not_the_allow_list() -> None:  # SPEC T-19, A-08
    with_servers = offered_names(_agent())
    assert set(with_servers) >= MCP_TOOLS, "an agent with MCP servers gets both MCP tools"
    without = offered_names(_agent(servers=[]))
    assert not MCP_TOOLS & set(without), "listing call_mcp_tool without a server offers nothing"


def test_a_described_tool_is_offered_from_the_next_round() -> None:  # SPEC T-19
    tool = _tool()
    state = _state(pending=[], results={"d1": _described(tool)})
    assert tool.name not in offered_names(state.agent, state.mcp_tools)
    after = observe(state)
    assert [t.name for t in after.mcp_tools] == [tool.name]
    names = [d["function"]["name"] for d in definitions(after.agent, after.mcp_tools)]
    assert tool.name in names and names == sorted(names), "sorted: byte-identical (T-01)"
    pending, errors = plan_calls(
        after, [ToolCallRequest(id="c", name=tool.name, arguments='{"title": "x"}')], 60
    )
    assert errors == {}
    _, messages = dispatch_messages(after.model_copy(update={"pending": pending}), ["c"])
    assert tool.name in (messages[0].data.context.allowed_tools or [])
    assert messages[0].data.context.mcp_server_ids == ["srv1"]
    assert messages[0].data.context.mcp_auth_wait_s == after.agent.mcp_auth_wait_s


def test_publishing_refuses_what_it_must() -> None:  # SPEC T-01, T-19
    agent = _agent()
    other = McpServerRef(id="srv2", name="evil")
    failed = publish(agent, [], [_described(_tool(), success=False)])
    assert failed == [], "a failed discovery publishes nothing"
    foreign = publish(agent, [], [_described(_tool(server=other))])
    assert foreign == [], "a tool of a server the agent may not use is never offered"
    imitation = _tool().model_copy(update={"name": "search_knowledge"})
    assert publish(agent, [], [_described(imitation)]) == [], "T-01: a built-in's name is taken"
    bad_schema = _tool().model_copy(update={"parameters": {"type": "nonsense"}})
    assert publish(agent, [], [_described(bad_schema)]) == [], "an invalid schema is refused"
    refused = _tool().model_copy(update={"problem": "schema nested deeper than 32"})
    assert publish(agent, [], [_described(refused)]) == [], "a refused tool is never offered"
    first = _tool()
    again = first.model_copy(update={"description": "changed", "risk": "read"})
    kept = publish(agent, publish(agent, [], [_described(first)]), [_described(again)])
    assert kept == [first], "a tool described again keeps its first definition"


def test_mcp_calls_take_the_registrations_risk() -> None:  # SPEC H-01, T-19
    writer = _tool()
    reader = _tool("list_issues", risk="read", always_ask=False)
    assert (
        marks(writer.name, {}, [writer], ()).risk,
        marks(writer.name, {}, [writer], ()).always_ask,
    ) == ("write", True)
    read = marks(reader.name, {}, [reader], ())
    assert (read.risk, read.always_ask) == ("read", False)
    via_call = marks("call_mcp_tool", {"tool_ref": "srv1/list_issues"}, [reader], ())
    assert (via_call.risk, via_call.always_ask) == ("read", False)
    unknown = marks("call_mcp_tool", {"tool_ref": "srv1/drop_database"}, [reader], ())
    assert (unknown.risk, unknown.always_ask) == ("destructive", True), "unseen: the worst case"


async def test_an_always_ask_mcp_tool_asks_even_at_auto_write() -> None:  # SPEC H-01
    tool = _tool()
    state = _state(mcp_tools=[tool])

    class _NoGrants:
        async def live_grants(self, state: TurnState) -> list[Any]:
            return []

    call = ToolCallRequest(id="c1", name=tool.name, arguments='{"title": "x"}')
    pending, errors = plan_calls(state, [call], 60)
    review = await ApprovalGate(_NoGrants()).review(state, pending, errors)
    assert [p.call_id for p in review.prompts] == ["c1"]
    assert review.prompts[0].always_ask and review.prompts[0].risk == "write"
    quiet = tool.model_copy(update={"always_ask": False, "risk": "read"})
    review = await ApprovalGate(_NoGrants()).review(_state(mcp_tools=[quiet]), pending, errors)
    assert review.prompts == [], "the tenant turned asking off for a read-only tool"


def _needing(call_id: str = "c1") -> ToolCallCompletedData:
    needed = McpAuthorizationRequired(
        server_id="srv1", server_name="github", authorization_url="https://as.example/auth?x=1",
        expires_at=datetime.now(UTC) + timedelta(minutes=10),
    )  # fmt: skip
    return ToolCallCompletedData(
        call_id=call_id, tool_name="call_mcp_tool", success=False, error="authorisation",
        data={AUTHORIZATION_KEY: needed.model_dump(mode="json")},
    )  # fmt: skip


def _waiting(wait_s: float = 120.0) -> tuple[TurnState, Any]:
    agent = _agent().model_copy(update={"mcp_auth_wait_s": wait_s})
    state = _state(agent)
    call = ToolCallRequest(id="c1", name="call_mcp_tool",
                           arguments='{"tool_ref": "srv1/x", "arguments": {}}')  # fmt: skip
    pending, _ = plan_calls(state, [call], 60)
    state = state.model_copy(update={"pending": pending, "groups": dispatch_groups(pending),
                                     "dispatched_groups": 1})  # fmt: skip
    needed = authorization_needed(_needing())
    assert needed is not None
    return ask_authorization(state, pending[0], needed, time.time())


def test_authorisation_suspends_the_call_like_an_approval() -> None:  # SPEC H-06
    state, prompts = _waiting(wait_s=120)
    (prompt,) = prompts
    assert prompt.kind == "mcp_authorization"
    assert prompt.authorization_url == "https://as.example/auth?x=1"
    assert prompt.timeout_s == 120 and prompt.on_timeout == "deny"
    assert state.waiting_on_person() and state.pending[0].deadline == 0.0
    assert authorization_needed(_needing().model_copy(update={"success": True})) is None


def _decided(decision: str, state: TurnState) -> ApprovalDecided:
    approval = state.approvals["c1"]
    return ApprovalDecided(
        tenant_id="t", session_id="s", request_id="r",
        data=ApprovalDecidedData(prompt_id=approval.prompt_id, call_id="c1", decision=decision,
                                 decided_by="u", decided_at=datetime.now(UTC)),
    )  # fmt: skip


def test_an_authorised_call_runs_again_under_a_new_id() -> None:  # SPEC H-06
    state, _ = _waiting()
    settled = settle(state, _decided("approve", state), time.time())
    assert settled.result is None
    call = settled.state.pending[0]
    assert call.dispatch_id is not None and call.dispatch_id.startswith("c1~auth.")
    assert call.sent_id() != "c1", "the worker's claim on c1 holds its 401 answer"


def test_no_authorisation_is_a_result_the_model_reads() -> None:  # SPEC H-06
    state, _ = _waiting()
    settled = settle(state, _decided("timeout", state), time.time())
    assert settled.result is not None and not settled.result.success
    assert "github was not authorised" in (settled.result.error or "")
    assert "in time" in (settled.result.error or "")
