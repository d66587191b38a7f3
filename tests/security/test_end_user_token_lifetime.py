"""End-user tokens have a maximum lifetime: a tenant's identity provider (or whoever stole
its signing key for a moment) cannot hand out a token that works for ten years. The
gateway's limit is WEFT_END_USER_MAX_TOKEN_LIFETIME_S (24 h); a provider's
``max_token_lifetime_s`` overrides it for its own tokens."""

from __future__ import annotations

import secrets
import time
from typing import Any

import jwt

from tests.security.admin_fixtures import AdminStack
from tests.security.test_admin_end_users import AUDIENCE, Idp

DAY = 86400
TEN_YEARS = 10 * 365 * DAY


def _token(idp: Idp, **claims: Any) -> str:
    """``idp``'s RS256 token with these claims; a claim set to None is left out."""
    now = int(time.time())
    body = {"iss": idp.issuer, "aud": AUDIENCE, "sub": "user-1", "iat": now, "exp": now + 300}
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.encode(body, idp.rsa, algorithm="RS256", headers={"kid": "rsa-1"})


async def _status(admin_stack: AdminStack, token: str) -> tuple[int, str]:
    async with admin_stack.public(token) as client:
        resp = await client.get("/api/v1/sessions")
        return resp.status_code, resp.text


async def _tenant(admin_stack: AdminStack, **provider: object) -> Idp:
    idp = Idp(f"https://idp-life-{secrets.token_hex(4)}.example/")
    await admin_stack.tenant(
        identity_provider={"issuer": idp.issuer, "audience": AUDIENCE, "jwks": idp.jwks,
                           **provider}
    )  # fmt: skip
    return idp


async def test_a_ten_year_token_is_refused_with_the_reason(admin_stack: AdminStack) -> None:
    idp = await _tenant(admin_stack)
    now = int(time.time())
    code, text = await _status(admin_stack, _token(idp, iat=now, exp=now + TEN_YEARS))
    assert code == 401, text
    assert "lifetime too long" in text and "86400" in text, text
    # Without iat, the lifetime counts from the moment the token is presented.
    code, text = await _status(admin_stack, _token(idp, iat=None, exp=now + TEN_YEARS))
    assert code == 401 and "lifetime too long" in text and "no iat" in text, text
    # An old iat does not help a token that is short-lived from now on: exp - iat counts.
    code, text = await _status(admin_stack, _token(idp, iat=now - 2 * DAY, exp=now + 600))
    assert code == 401 and "lifetime too long" in text, text


async def test_tokens_within_the_limit_pass(admin_stack: AdminStack) -> None:
    idp = await _tenant(admin_stack)
    now = int(time.time())
    for claims in (
        {"iat": now, "exp": now + 300},
        {"iat": now - 60, "exp": now - 60 + DAY},  # exactly the default day
        {"iat": None, "exp": now + DAY - 120},  # no iat: from now
    ):
        code, text = await _status(admin_stack, _token(idp, **claims))
        assert code == 200, (claims, text)


async def test_a_provider_sets_its_own_limit(admin_stack: AdminStack) -> None:
    now = int(time.time())
    short = await _tenant(admin_stack, max_token_lifetime_s=600)
    code, text = await _status(admin_stack, _token(short, iat=now, exp=now + 3600))
    assert code == 401 and "at most 600 s" in text, text
    assert (await _status(admin_stack, _token(short, iat=now, exp=now + 500)))[0] == 200
    week = await _tenant(admin_stack, max_token_lifetime_s=7 * DAY)
    assert (await _status(admin_stack, _token(week, iat=now, exp=now + 3 * DAY)))[0] == 200
    code, text = await _status(admin_stack, _token(week, iat=now, exp=now + 8 * DAY))
    assert code == 401 and "lifetime too long" in text, text
