"""Units of the admin API: the operator credential, tenant settings, Redis key patterns of
a tenant, and end-user JWT checks against an inline key set (no network)."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from fastapi import Depends, FastAPI, HTTPException
from fastapi.testclient import TestClient
from jwt.algorithms import OKPAlgorithm, RSAAlgorithm
from pydantic import ValidationError
from weft_gateway.admin_auth import Operator, OperatorAuth, require_operator
from weft_gateway.end_users import EndUserAuth
from weft_gateway.tenant_purge import stream_pattern, tenant_patterns
from weft_gateway.tenant_registry import IdentityProvider, TenantRegistry, TenantSettings


def _app(setting: str | None) -> TestClient:
    app = FastAPI()
    if setting is not None:
        app.state.operator_auth = OperatorAuth.from_setting(setting)

    @app.get("/admin/v1/ping")
    def ping(who: Operator = Depends(require_operator)) -> dict[str, str]:
        return {"who": who.id}

    return TestClient(app)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def test_admin_routes_do_not_exist_without_an_operator_credential() -> None:
    for setting in (None, "", " , "):
        resp = _app(setting).get("/admin/v1/ping", headers={"Authorization": "Bearer x"})
        assert resp.status_code == 404 and "admin API disabled" in resp.json()["detail"]


def test_operator_token_is_checked_against_every_configured_digest() -> None:
    client = _app(f"{_digest('first')}, {_digest('second').upper()}")
    for token in ("first", "second"):
        resp = client.get("/admin/v1/ping", headers={"Authorization": f"Bearer {token}"})
        assert resp.status_code == 200
        assert resp.json()["who"] == f"operator:{_digest(token)[:12]}"
    assert client.get("/admin/v1/ping").status_code == 401
    for header in ("Bearer third", f"Bearer {_digest('first')}", "Bearer firs"):
        assert client.get("/admin/v1/ping", headers={"Authorization": header}).status_code == 403


def test_a_malformed_digest_is_refused_at_start() -> None:
    for setting in ("abc", "g" * 64, _digest("x") + "0"):
        with pytest.raises(ValueError, match="64 hex digits"):
            OperatorAuth.from_setting(setting)


def test_tenant_settings_accept_only_asymmetric_algorithms_and_one_key_source() -> None:
    good = {"issuer": "https://i", "audience": "a", "jwks": {"keys": []}}
    IdentityProvider.model_validate(good)
    for bad in (
        {**good, "algorithms": ["HS256"]},
        {**good, "algorithms": ["none"]},
        {**good, "algorithms": []},
        {**good, "jwks_url": "https://i/jwks"},
        {"issuer": "https://i", "audience": "a"},
        {**good, "extra": 1},
    ):
        with pytest.raises(ValidationError):
            IdentityProvider.model_validate(bad)
    with pytest.raises(ValidationError):
        TenantSettings.model_validate({"retention": {"messages_days": 0}})


def test_tenant_key_patterns_are_exact_and_escaped() -> None:
    assert "weft:stream:acme:*" in tenant_patterns("acme")
    # Every pattern ends at the tenant (an exact key) or after it (":*"), never inside it.
    assert all(
        p.startswith("weft:") and (p.endswith(":*") or p.endswith(":acme"))
        for p in tenant_patterns("acme")
    )
    # The sandbox's ledger of a tenant's workspace bytes is one key, the tenant last.
    assert "weft:t1.sandboxbytes:acme" in tenant_patterns("acme", "t1.")
    assert "weft:sandboxbytes:a\\*b" in tenant_patterns("a*b")
    # Ids from before the tenants table: glob characters escaped; ':' gets no pattern,
    # since "a:*" would also match tenant "a:b"'s keys.
    assert "weft:stream:a\\*b:*" in tenant_patterns("a*b")
    assert tenant_patterns("a:b") == []
    # The write-call claims carry the deployment's topic prefix before their family.
    assert "weft:t1.sandboxcall:acme:*" in tenant_patterns("acme", "t1.")
    assert "weft:t1.toolcall:acme:*" in tenant_patterns("acme", "t1.")
    assert "weft:toolcall:acme:*" in tenant_patterns("acme")
    assert r"weft:t\*.toolcall:acme:*" in tenant_patterns("acme", "t*.")


class _Registry(TenantRegistry):
    def __init__(self, providers: dict[str, tuple[str, str, IdentityProvider]]):
        self.providers = providers
        self.lookups = 0

    async def by_issuer(self, issuer: str) -> tuple[str, str, IdentityProvider] | None:
        self.lookups += 1
        return self.providers.get(issuer)


def _jwk(public: str, kid: str) -> dict[str, Any]:
    key: dict[str, Any] = json.loads(public)
    key["kid"] = kid
    return key


async def test_end_user_token_checks_with_an_inline_key_set() -> None:
    signer = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ed = ed25519.Ed25519PrivateKey.generate()
    jwks = {
        "keys": [
            _jwk(RSAAlgorithm.to_jwk(signer.public_key()), "r"),
            _jwk(OKPAlgorithm.to_jwk(ed.public_key()), "e"),
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},  # skipped: symmetric
        ]
    }
    provider = IdentityProvider(issuer="https://idp", audience="weft", jwks=jwks)
    registry = _Registry({"https://idp": ("acme", "active", provider)})
    auth = EndUserAuth(registry, leeway_s=0)
    now = int(time.time())
    claims = {"iss": "https://idp", "aud": "weft", "sub": "u1", "exp": now + 60}
    no_issuer = {k: v for k, v in claims.items() if k != "iss"}
    principal, status = await auth.authenticate(
        jwt.encode(claims, signer, algorithm="RS256", headers={"kid": "r"})
    )
    assert (principal.tenant_id, principal.user_id, status) == ("acme", "u1", "active")
    assert principal.knowledge_base_ids is None
    refused = {
        "algorithm 'HS256' not accepted": jwt.encode(claims, "s" * 32, algorithm="HS256",
                                                     headers={"kid": "hmac"}),
        "signing key not found": jwt.encode(claims, signer, algorithm="RS256",
                                            headers={"kid": "other"}),
        "no issuer": jwt.encode(no_issuer, signer, algorithm="RS256", headers={"kid": "r"}),
        "expired": jwt.encode({**claims, "exp": now - 10}, signer, algorithm="RS256",
                              headers={"kid": "r"}),
        "does not match": jwt.encode(claims, signer, algorithm="RS256", headers={"kid": "e"}),
    }  # fmt: skip
    for reason, token in refused.items():
        with pytest.raises(HTTPException) as caught:
            await auth.authenticate(token)
        assert caught.value.status_code == 401
        assert reason in str(caught.value.detail), (reason, caught.value.detail)
    await auth.aclose()


async def test_an_unreachable_identity_provider_is_a_503_not_a_pass() -> None:
    provider = IdentityProvider(
        issuer="https://idp", audience="weft", jwks_url="http://127.0.0.1:9/jwks.json"
    )
    auth = EndUserAuth(_Registry({"https://idp": ("acme", "active", provider)}))
    signer = ed25519.Ed25519PrivateKey.generate()
    claims = {"iss": "https://idp", "aud": "weft", "sub": "u", "exp": int(time.time()) + 60}
    token = jwt.encode(claims, signer, algorithm="EdDSA", headers={"kid": "k"})
    with pytest.raises(HTTPException) as caught:
        await auth.authenticate(token)
    assert caught.value.status_code == 503
    await auth.aclose()


async def test_key_rotation_at_the_provider_is_followed_without_a_fetch_storm() -> None:
    old, new = ed25519.Ed25519PrivateKey.generate(), ed25519.Ed25519PrivateKey.generate()
    published = {"keys": [_jwk(OKPAlgorithm.to_jwk(old.public_key()), "old")]}
    fetches = 0

    def serve(request: httpx.Request) -> httpx.Response:
        nonlocal fetches
        fetches += 1
        return httpx.Response(200, json=published)

    provider = IdentityProvider(issuer="https://idp", audience="weft", jwks_url="https://idp/k")

    def auth_with_floor(floor_s: float) -> EndUserAuth:
        return EndUserAuth(
            _Registry({"https://idp": ("acme", "active", provider)}),
            http=httpx.AsyncClient(transport=httpx.MockTransport(serve)),
            jwks_min_refresh_s=floor_s,
        )

    claims = {"iss": "https://idp", "aud": "weft", "sub": "u", "exp": int(time.time()) + 60}

    def signed(key: ed25519.Ed25519PrivateKey, kid: str) -> str:
        return jwt.encode(claims, key, algorithm="EdDSA", headers={"kid": kid})

    patient = auth_with_floor(3600)
    await patient.authenticate(signed(old, "old"))
    for n in range(20):  # made-up kids: refused from the cached set, no new fetch
        with pytest.raises(HTTPException, match="signing key not found"):
            await patient.authenticate(signed(new, f"bogus-{n}"))
    assert fetches == 1
    await patient.aclose()

    eager = auth_with_floor(0)
    await eager.authenticate(signed(old, "old"))
    assert fetches == 2
    published["keys"].append(_jwk(OKPAlgorithm.to_jwk(new.public_key()), "new"))
    principal, _ = await eager.authenticate(signed(new, "new"))  # unknown kid: fetch again
    assert principal.user_id == "u" and fetches == 3
    await eager.aclose()


def test_stream_pattern_is_the_tenants_streams_only() -> None:
    assert stream_pattern("acme") == "weft:stream:acme:*"
    assert stream_pattern("a:b") is None
