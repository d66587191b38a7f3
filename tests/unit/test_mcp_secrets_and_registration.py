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
    assert [str(n) for n in s.networks()] == ["127.0.0.1/32", "10.0.0.0/8"]
    assert s.hosts() == frozenset({"mcp.local"})
    with pytest.raises(ValueError, match="'nope' is not a network"):
        McpSettings(mcp_allowed_networks="nope").networks()
    assert McpSettings(public_base_url="https://weft.example/").redirect_uri() == (
        "https://weft.example/api/v1/mcp/oauth/callback"
    )
