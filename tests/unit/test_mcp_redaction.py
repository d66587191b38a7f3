"""The rules of scrubbing a registration's secrets from what a server sends back, and the
secrets' absence from the reprs a log line or a traceback would show (SPEC T-19)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from weft_agent_config.mcp.oauth_store import PendingState
from weft_contracts import ToolContext
from weft_contracts.mcp import McpConnection, McpServerCatalog, McpToolDef
from weft_mcp_client.oauth import OAuthClient, OAuthTokens
from weft_mcp_client.redaction import REDACTED, connection_secrets, redact_text, redact_value
from weft_mcp_client.safe_http import AddressPolicy
from weft_mcp_client.transport import pinned_client_factory
from weft_tool_catalog.registry import ToolInvocation
from weft_tools.mcp_calls import McpCaller, Resolved
from weft_tools.mcp_directory import HttpMcpDirectory, McpDirectoryError
from weft_tools.mcp_pool import McpSessionPool, TurnKey

KEY = "sk-abcdef0123456789"
TOKEN = "at-0123456789abcdef"


def conn() -> McpConnection:
    return McpConnection(
        server_id="s1", server_name="n", url="https://mcp.example.com/mcp",
        transport="streamable_http",
        headers={"X-Api-Key": KEY, "X-Region": "eu", "Authorization": f"Bearer {KEY}-2"},
        access_token=TOKEN,
    )  # fmt: skip


def test_secrets_are_the_long_values_and_their_words() -> None:
    found = connection_secrets(conn())
    assert {KEY, TOKEN, f"Bearer {KEY}-2", f"{KEY}-2"} <= found
    assert "eu" not in found and "Bearer" not in found, "short values are settings"


def test_a_value_goes_whole_before_a_word_of_it() -> None:
    secrets = connection_secrets(conn())
    text = f"got Bearer {KEY}-2 and {KEY} and {TOKEN} in eu"
    assert redact_text(text, secrets) == f"got {REDACTED} and {REDACTED} and {REDACTED} in eu"


def test_nested_values_and_keys_are_scrubbed() -> None:
    value = {KEY: [{"t": f"x{TOKEN}y"}, 3, None], "ok": "eu"}
    assert redact_value(value, connection_secrets(conn())) == {
        REDACTED: [{"t": f"x{REDACTED}y"}, 3, None],
        "ok": "eu",
    }
    assert redact_value(value, frozenset()) is value


def test_reprs_never_show_a_secret() -> None:
    shown = [
        repr(conn()),
        str(conn()),
        repr(OAuthTokens(access_token=TOKEN, refresh_token=KEY, expires_at=None)),
        repr(
            OAuthClient(
                issuer="i",
                authorization_endpoint="a",
                token_endpoint="t",
                client_id="c",
                client_secret=KEY,
                redirect_uri="r",
            )
        ),
        repr(
            PendingState(
                tenant_id="t",
                user_id="u",
                session_id="s",
                request_id="r",
                call_id="c",
                server_id="s1",
                verifier=KEY,
            )
        ),
    ]
    for text in shown:
        assert KEY not in text and TOKEN not in text, text
    assert conn().model_dump()["headers"]["X-Api-Key"] == KEY, "the wire form keeps them"


async def test_a_malformed_connection_answer_names_no_secret() -> None:
    """pydantic quotes the input it refuses; a connection's input holds the secrets."""
    bad = {**conn().model_dump(mode="json"), "transport": "stdio", "timeout_s": 10_000}

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=bad)

    directory = HttpMcpDirectory("http://agent-config", transport=httpx.MockTransport(answer))
    with pytest.raises(McpDirectoryError) as raised:
        await directory.connection("s1", credential="c")
    message = str(raised.value)
    assert "transport" in message and KEY not in message and TOKEN not in message
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


class FailingPool(McpSessionPool):
    """Opens the connection like the real pool, then fails as an unmapped SDK error would,
    quoting what the server sent."""

    async def run(self, turn: TurnKey, server_id: str, conn: Any, use: Any, *,
                  timeout_s: float) -> Any:  # fmt: skip
        await conn()
        raise ValueError(f"input_value='invalid key {KEY}'")


async def test_an_unmapped_failure_is_scrubbed_too() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=conn().model_dump(mode="json"))

    directory = HttpMcpDirectory("http://agent-config", transport=httpx.MockTransport(answer))
    caller = McpCaller(directory, FailingPool(pinned_client_factory(AddressPolicy())))
    tool = McpToolDef(name="mcp_n_t_00000000", server_id="s1", server_name="n", tool_name="t")
    server = McpServerCatalog(id="s1", name="n", tools=[tool])
    call = ToolInvocation(
        tenant_id="t", session_id="s", request_id="r", arguments={},
        context=ToolContext(user_id="u", agent_id="a", mcp_server_ids=["s1"]), credential="c",
    )  # fmt: skip
    outcome = await caller.call(call, Resolved(server, tool), {})
    assert not outcome.success and outcome.error and "ValueError" in outcome.error
    assert KEY not in outcome.error and REDACTED in outcome.error
