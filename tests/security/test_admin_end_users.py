"""End users vouched for by their tenant's identity provider, on the real stack: a JWK set
served over HTTP by this test (tenant A) or inline (tenant B); hostile tokens answer 401
with the reason; a valid token's ``sub`` is a user of that tenant and of no other."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from tests.security.admin_fixtures import AdminStack

AUDIENCE = "weft-api"


def _jwk(public_jwk: str, kid: str) -> dict[str, Any]:
    key: dict[str, Any] = json.loads(public_jwk)
    key["kid"] = kid
    return key


class Idp:
    """One identity provider: its keys and how it signs."""

    def __init__(self, issuer: str):
        self.issuer = issuer
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.ed = ed25519.Ed25519PrivateKey.generate()
        self.jwks = {
            "keys": [
                _jwk(RSAAlgorithm.to_jwk(self.rsa.public_key()), "rsa-1"),
                _jwk(ECAlgorithm.to_jwk(self.ec.public_key()), "ec-1"),
                _jwk(OKPAlgorithm.to_jwk(self.ed.public_key()), "ed-1"),
            ]
        }

    def token(self, sub: str = "user-1", alg: str = "RS256", **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.issuer, "aud": AUDIENCE, "sub": sub, "iat": now, "exp": now + 300}
        body.update(claims)
        if alg == "RS256":
            return jwt.encode(body, self.rsa, algorithm=alg, headers={"kid": "rsa-1"})
        if alg == "ES256":
            return jwt.encode(body, self.ec, algorithm=alg, headers={"kid": "ec-1"})
        return jwt.encode(body, self.ed, algorithm=alg, headers={"kid": "ed-1"})


@pytest.fixture(scope="module")
def jwks_server() -> Iterator[tuple[str, dict[str, Any]]]:
    """A local HTTP server of JWK sets: ``documents[path] = jwks``; its base URL."""
    documents: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            doc = documents.get(self.path)
            body = json.dumps(doc).encode() if doc is not None else b"{}"
            self.send_response(200 if doc is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", documents
    server.shutdown()


async def _tenants_with_idps(
    admin_stack: AdminStack, jwks_server: tuple[str, dict[str, Any]]
) -> tuple[tuple[str, Idp], tuple[str, Idp]]:
    base, documents = jwks_server
    idp_a = Idp(f"https://idp-a-{secrets.token_hex(4)}.example/")
    idp_b = Idp(f"https://idp-b-{secrets.token_hex(4)}.example/")
    path = f"/{secrets.token_hex(4)}/jwks.json"
    documents[path] = idp_a.jwks
    tenant_a = await admin_stack.tenant(
        identity_provider={"issuer": idp_a.issuer, "audience": AUDIENCE, "jwks_url": base + path}
    )
    tenant_b = await admin_stack.tenant(
        identity_provider={"issuer": idp_b.issuer, "audience": AUDIENCE, "jwks": idp_b.jwks,
                           "algorithms": ["EdDSA"]}
    )  # fmt: skip
    return (tenant_a, idp_a), (tenant_b, idp_b)


async def _status(admin_stack: AdminStack, token: str) -> tuple[int, str]:
    async with admin_stack.public(token) as client:
        resp = await client.get("/api/v1/sessions")
        return resp.status_code, resp.text


async def test_end_user_tokens_of_each_algorithm_name_users_of_their_tenant(
    admin_stack: AdminStack, jwks_server: tuple[str, dict[str, Any]]
) -> None:
    (tenant_a, idp_a), (_, idp_b) = await _tenants_with_idps(admin_stack, jwks_server)
    for alg in ("RS256", "ES256", "EdDSA"):
        assert (await _status(admin_stack, idp_a.token(alg=alg)))[0] == 200, alg
    async with admin_stack.public(idp_a.token(sub="ann")) as ann:
        made = await ann.post("/api/v1/sessions", json={"title": "ann's"})
        assert made.status_code == 201, made.text
        sid = made.json()["id"]
        assert made.json()["user_id"] == "ann" and made.json()["tenant_id"] == tenant_a
    # Another user of A, and a user of B with the same sub, do not see it.
    for token in (idp_a.token(sub="bob"), idp_b.token(sub="ann", alg="EdDSA")):
        async with admin_stack.public(token) as other:
            assert (await other.get(f"/api/v1/sessions/{sid}")).status_code == 404
            assert sid not in (await other.get("/api/v1/sessions")).text
    # B allows EdDSA only.
    code, text = await _status(admin_stack, idp_b.token(alg="RS256"))
    assert code == 401 and "not allowed" in text


async def test_hostile_end_user_tokens_are_refused_with_a_reason(
    admin_stack: AdminStack, jwks_server: tuple[str, dict[str, Any]]
) -> None:
    (tenant_a, idp_a), (tenant_b, idp_b) = await _tenants_with_idps(admin_stack, jwks_server)
    now = int(time.time())
    stranger = Idp(f"https://stranger-{secrets.token_hex(4)}.example/")
    impostor = Idp(idp_a.issuer)  # same issuer and kids, other keys
    public_pem = idp_a.rsa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    claims = {"iss": idp_a.issuer, "aud": AUDIENCE, "sub": "x", "exp": now + 300}
    unsigned = _hand_made({"alg": "none", "typ": "JWT"}, claims, None)
    # The classic confusion: the RSA public key used as an HMAC secret.
    hs_with_public_key = _hand_made({"alg": "HS256", "kid": "rsa-1"}, claims, public_pem)
    cases = {
        "unknown issuer": stranger.token(),
        "expired": idp_a.token(exp=now - 3600, iat=now - 7200),
        "not valid yet": idp_a.token(nbf=now + 3600),
        "wrong audience": idp_a.token(aud="someone-else"),
        "bad signature": impostor.token(),
        "algorithm 'none' not accepted": unsigned,
        "algorithm 'HS256' not accepted": hs_with_public_key,
        # B's key, A's issuer: A's key set has no such key, or the signature fails.
        "signing key not found": _resigned(idp_b, idp_a.issuer, kid="ed-9"),
        "signature": _resigned(idp_b, idp_a.issuer, kid="ed-1"),
        "malformed": "eyJhbGciOiJSUzI1NiJ9.not-json.sig",
        "subject (sub)": idp_a.token(sub=""),
    }
    for reason, token in cases.items():
        code, text = await _status(admin_stack, token)
        assert code == 401, (reason, code, text)
        assert reason in text, (reason, text)
        assert "invalid end-user token" in text
    # A's token says nothing about B: its issuer decides, and it names A.
    async with admin_stack.public(idp_a.token(sub="z")) as client:
        made = await client.post("/api/v1/sessions", json={})
        assert made.json()["tenant_id"] == tenant_a != tenant_b


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _hand_made(header: dict[str, Any], claims: dict[str, Any], hmac_key: bytes | None) -> str:
    """A token PyJWT would refuse to make: unsigned, or HMAC-signed with ``hmac_key``."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    if hmac_key is None:
        return signing_input + "."
    mac = hmac.new(hmac_key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(mac)}"


def _resigned(idp: Idp, issuer: str, kid: str) -> str:
    now = int(time.time())
    body = {"iss": issuer, "aud": AUDIENCE, "sub": "mallory", "exp": now + 300}
    return jwt.encode(body, idp.ed, algorithm="EdDSA", headers={"kid": kid})


async def test_end_users_of_a_suspended_tenant_are_refused(
    admin_stack: AdminStack, jwks_server: tuple[str, dict[str, Any]]
) -> None:
    (tenant_a, idp_a), _ = await _tenants_with_idps(admin_stack, jwks_server)
    assert (await _status(admin_stack, idp_a.token()))[0] == 200
    await admin_stack.admin.post(f"/admin/v1/tenants/{tenant_a}/suspend")
    deadline = time.monotonic() + 15
    while (code := (await _status(admin_stack, idp_a.token()))[0]) != 403:
        assert time.monotonic() < deadline, code
    assert "tenant suspended" in (await _status(admin_stack, idp_a.token()))[1]


async def test_identity_provider_settings_are_validated(admin_stack: AdminStack) -> None:
    admin = admin_stack.admin
    issuer = f"https://idp-{secrets.token_hex(4)}.example/"
    good = {"issuer": issuer, "audience": "a", "jwks": {"keys": []}}
    bad = [
        {"issuer": issuer, "audience": "a"},  # no key source
        {**good, "jwks_url": "https://x.example/jwks"},  # both
        {**good, "algorithms": ["HS256"]},
        {**good, "algorithms": ["none"]},
        {**good, "jwks": {"nope": 1}},
        {"issuer": issuer, "audience": "a", "jwks_url": "file:///etc/passwd"},
    ]
    for idp in bad:
        resp = await admin.post(
            "/admin/v1/tenants",
            json={"id": f"t-{secrets.token_hex(4)}", "settings": {"identity_provider": idp}},
        )
        assert resp.status_code == 422, (idp, resp.text)
    await admin_stack.tenant(identity_provider=good)
    taken = await admin.post(
        "/admin/v1/tenants",
        json={"id": f"t-{secrets.token_hex(4)}", "settings": {"identity_provider": good}},
    )
    assert taken.status_code == 409 and "issuer" in taken.text
