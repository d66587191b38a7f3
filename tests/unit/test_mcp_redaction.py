"""The rules of scrubbing a registration's secrets from what a server sends back, and the
secrets' absence from the reprs a log line or a traceback would show (SPEC T-19)."""

from __future__ import annotations

import httpx
import pytest
from weft_agent_config.mcp.oauth_store import PendingState
from weft_contracts.mcp import McpConnection
from weft_mcp_client.oauth import OAuthClient, OAuthTokens
from weft_mcp_client.redaction import REDACTED, connection_secrets, redact_text, redact_value
from weft_tools.mcp_directory import HttpMcpDirectory, McpDirectoryError

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
