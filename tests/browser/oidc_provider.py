"""A local OpenID provider for the console's sign-in test (a test double, in a thread):
authorization code with PKCE (S256 only), one registered public client and redirect URI,
single-use codes, RS256 access tokens for the gateway to verify against ``/jwks.json``.
``/authorize`` signs in ``subject`` at once (no login page: the browser test checks the
console's side of the flow, not a provider's login form)."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

AUDIENCE = "weft-api"
CLIENT_ID = "weft-console"


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class LocalProvider:
    """The provider's state; ``serve()`` starts it on a free port of 127.0.0.1."""

    def __init__(self, subject: str) -> None:
        self.subject = subject
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        self.jwks = {"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}
        self.redirect_uri = ""
        self.codes: dict[str, dict[str, str]] = {}
        self.tokens_issued = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def serve(self) -> None:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str], dict[str, Any]]:
        ok = (
            query.get("response_type") == "code"
            and query.get("client_id") == CLIENT_ID
            and query.get("redirect_uri") == self.redirect_uri
            and query.get("code_challenge_method") == "S256"
            and len(query.get("code_challenge", "")) == 43
            and query.get("state")
        )
        if not ok:
            return 400, {}, {"error": "invalid_request"}
        code = secrets.token_urlsafe(24)
        self.codes[code] = {"challenge": query["code_challenge"], "redirect": self.redirect_uri}
        location = f"{self.redirect_uri}?{urlencode({'code': code, 'state': query['state']})}"
        return 302, {"Location": location}, {}

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        grant = self.codes.pop(form.get("code", ""), None)  # single use
        verifier = form.get("code_verifier", "")
        challenge = _b64url(hashlib.sha256(verifier.encode()).digest())
        if (
            grant is None
            or form.get("grant_type") != "authorization_code"
            or form.get("client_id") != CLIENT_ID
            or form.get("redirect_uri") != grant["redirect"]
            or challenge != grant["challenge"]
        ):
            return 400, {"error": "invalid_grant"}
        now = int(time.time())
        claims = {
            "iss": self.url,
            "aud": AUDIENCE,
            "sub": self.subject,
            "iat": now,
            "exp": now + 300,
        }
        token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "k1"})
        self.tokens_issued += 1
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": 300}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                origin = urlsplit(provider.redirect_uri)
                self.send_header(
                    "Access-Control-Allow-Origin", f"{origin.scheme}://{origin.netloc}"
                )
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == "/jwks.json":
                    self._answer(200, provider.jwks, {})
                elif url.path == "/authorize":
                    status, headers, body = provider.authorize(query)
                    self._answer(status, body, headers)
                else:
                    self._answer(404, {"error": "not_found"}, {})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                if urlsplit(self.path).path != "/token":
                    self._answer(404, {"error": "not_found"}, {})
                    return
                status, body = provider.token(form)
                self._answer(status, body, {"Cache-Control": "no-store"})

        return Handler
