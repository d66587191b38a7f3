"""SPEC T-19: the MCP secret box (MultiFernet, key rollover) and what a registration may
carry (names, headers) and the operator's allowlist settings."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from pydantic import ValidationError
from weft_agent_config.mcp.registration import (
    MAX_HEADERS,
    ServerCreate,
    ServerUpdate,
    header_problem,
)
from weft_agent_config.mcp.secret_box import (
    SecretBox,
    SecretsUnavailable,
    UnreadableSecret,
    parse_keys,
)
from weft_agent_config.mcp.settings import McpSettings


def key() -> str:
    return Fernet.generate_key().decode()


def test_a_sealed_secret_is_not_its_text_and_opens_again() -> None:
    box = SecretBox.from_setting(key())
    token = box.seal_json({"Authorization": "Bearer s3cr3t"})
    assert "s3cr3t" not in token
    assert box.open_json(token) == {"Authorization": "Bearer s3cr3t"}


def test_rollover_old_and_new_keys_both_open_and_rotate_moves_to_the_new_key() -> None:
    old, new = key(), key()
    sealed_with_old = SecretBox.from_setting(old).seal("value")
    during = SecretBox.from_setting(f"{new},{old}")
    assert during.open(sealed_with_old) == "value"
    rotated = during.rotate(sealed_with_old)
    after = SecretBox.from_setting(new)  # the old key dropped after re-encrypting
    assert after.open(rotated) == "value"
    with pytest.raises(UnreadableSecret):
        after.open(sealed_with_old)


def test_without_keys_nothing_is_sealed() -> None:
    box = SecretBox.from_setting("")
    assert not box.configured
    with pytest.raises(SecretsUnavailable):
        box.seal("x")


def test_a_bad_key_is_named_by_position() -> None:
    with pytest.raises(ValueError, match="key 2 is not a Fernet key"):
        parse_keys(f"{key()},not-a-key")


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("X-Api-Key", "abc", None),
        ("Bad Name", "v", "not an HTTP token"),
        ("X-Split", "a\r\nInjected: 1", "CR, LF or NUL"),
        ("Host", "evil.example", "set by Weft itself"),
        ("content-length", "1", "set by Weft itself"),
        ("Transfer-Encoding", "chunked", "set by Weft itself"),
        ("Connection", "close", "set by Weft itself"),
        ("X-Huge", "x" * 9000, "longer than 8192 bytes"),
    ],
)
def test_header_rules(name: str, value: str, reason: str | None) -> None:
    problem = header_problem(name, value)
    if reason is None:
        assert problem is None
    else:
        assert problem is not None and reason in problem


def test_too_many_headers_and_bad_names_are_refused() -> None:
    many = {f"X-H{i}": "v" for i in range(MAX_HEADERS + 1)}
    with pytest.raises(ValidationError, match="at most 20 headers"):
        ServerCreate(name="ok", url="https://x.example/mcp", headers=many)
    with pytest.raises(ValidationError):
        ServerCreate(name="Not A Slug", url="https://x.example/mcp")
    with pytest.raises(ValidationError, match="CR, LF"):
        ServerUpdate(headers={"X-A": "1\n2"})


def test_allowlist_settings_parse_and_name_a_bad_entry() -> None:
    s = McpSettings(mcp_allowed_networks="127.0.0.1/32, 10.0.0.0/8", mcp_allowed_hosts="Mcp.Local.")
    policy = s.mcp_policy()
    assert [str(n) for n in policy.allowed_networks] == ["127.0.0.1/32", "10.0.0.0/8"]
    assert policy.allowed_hosts == frozenset({"mcp.local"})
    with pytest.raises(ValueError, match="not a network in the MCP allowlist: 'nope'"):
        McpSettings(mcp_allowed_networks="nope").mcp_policy()
    assert McpSettings(public_base_url="https://weft.example/").redirect_uri() == (
        "https://weft.example/api/v1/mcp/oauth/callback"
    )


async def test_an_authorisation_link_lives_as_long_as_the_turn_waits() -> None:  # SPEC H-06
    from datetime import UTC, datetime
    from typing import Any

    from weft_agent_config.mcp.oauth_flow import OAuthFlow
    from weft_agent_config.mcp.oauth_store import PendingState
    from weft_mcp_client.oauth import OAuthClient
    from weft_storage.agent_config.models_mcp import McpServer

    stored: list[datetime] = []

    class Store:
        async def add_state(self, state: str, pending: Any, expires_at: datetime) -> None:
            stored.append(expires_at)

    class Flow(OAuthFlow):
        async def client(self, server: Any, www_authenticate: str | None) -> OAuthClient:
            return OAuthClient(
                issuer="https://as.example", authorization_endpoint="https://as.example/a",
                token_endpoint="https://as.example/t", client_id="c", client_secret=None,
                redirect_uri="https://gw.example/cb",
            )  # fmt: skip

    flow = Flow(Store(), None, "https://gw.example/cb", 600)  # type: ignore[arg-type]
    server = McpServer(id="srv_1", name="github", url="https://mcp.example/mcp")
    pending = PendingState(tenant_id="t", user_id="u", session_id="s", request_id="r",
                           call_id="c1", server_id="srv_1", verifier="")  # fmt: skip
    for wait, life in ((None, 600), (60, 600), (3600, 3600)):
        required = await flow.start(server, pending, None, wait)
        seconds = (stored[-1] - datetime.now(UTC)).total_seconds()
        assert abs(seconds - life) < 30, (wait, seconds)
        assert required.expires_at == stored[-1]


def test_the_reencrypt_step_rotates_every_encrypted_column() -> None:
    """A key rollover re-encrypts every MCP secret: a new ``*_encrypted`` column that the
    step does not know would keep its tokens under the old key, lost when it is dropped."""
    from weft_agent_config.mcp.reencrypt import COLUMNS
    from weft_storage.agent_config import models_mcp

    tables = [m.__table__ for m in vars(models_mcp).values()
              if isinstance(m, type) and hasattr(m, "__table__")]  # fmt: skip
    encrypted = {f"{t.name}.{c.name}" for t in tables for c in t.columns
                 if c.name.endswith("_encrypted")}  # fmt: skip
    rotated = {f"{c.class_.__tablename__}.{c.key}" for c in COLUMNS}
    assert encrypted and encrypted == rotated
