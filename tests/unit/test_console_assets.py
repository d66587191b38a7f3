"""The gateway's console assets (``weft_gateway.console_assets``): the page and its hashed
assets carry a Content-Security-Policy with no inline script and no framing; only ``/``,
``/index.html`` and ``/assets/...`` are served, so the API keeps its own answers; a console
that was not built is skipped (logged), never a failed start; a path that leaves the assets
folder is 404."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient
from weft_gateway.console_assets import CONTENT_SECURITY_POLICY, OidcSignIn, mount_console


def _built(tmp_path: Path) -> Path:
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text('<script type="module" src="/assets/app.js"></script>')
    (dist / "assets" / "app.js").write_text("console.log('hi')")
    (tmp_path / "secret.txt").write_text("not for browsers")
    return dist


def _app(console_dir: str) -> tuple[FastAPI, bool]:
    app = FastAPI()

    @app.get("/api/v1/ping")
    async def ping() -> dict[str, str]:
        return {"pong": "yes"}

    return app, mount_console(app, console_dir)


def test_page_and_assets_carry_the_policy(tmp_path: Path) -> None:
    app, mounted = _app(str(_built(tmp_path)))
    assert mounted
    client = TestClient(app)
    for path in ("/", "/index.html", "/assets/app.js"):
        resp = client.get(path)
        assert resp.status_code == 200, path
        assert resp.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert resp.headers["x-content-type-options"] == "nosniff"
        assert resp.headers["x-frame-options"] == "DENY"
    assert client.get("/").headers["cache-control"] == "no-cache"
    assert "immutable" in client.get("/assets/app.js").headers["cache-control"]
    policy = dict(d.split(" ", 1) for d in CONTENT_SECURITY_POLICY.split("; "))
    assert policy["script-src"] == "'self'" and policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY


def test_other_paths_keep_the_apis_answers(tmp_path: Path) -> None:
    app, _ = _app(str(_built(tmp_path)))
    client = TestClient(app)
    assert client.get("/api/v1/ping").json() == {"pong": "yes"}
    missing = client.get("/api/v1/nothing")
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}
    assert client.get("/secret.txt").status_code == 404
    for escape in ("/assets/../secret.txt", "/assets/..%2fsecret.txt", "/assets/%2e%2e/secret.txt"):
        resp = client.get(escape)
        assert resp.status_code == 404, escape
        assert "not for browsers" not in resp.text


def test_unbuilt_or_unset_console_is_skipped(tmp_path: Path) -> None:
    app, mounted = _app(str(tmp_path / "missing"))
    assert not mounted
    assert TestClient(app).get("/").status_code == 404
    app, mounted = _app("")
    assert not mounted


def test_sign_in_config_and_the_providers_origin(tmp_path: Path) -> None:
    oidc = OidcSignIn(
        issuer="https://login.example.com/",
        client_id="weft-console",
        authorize_url="https://login.example.com/authorize",
        token_url="https://tokens.example.com:8443/oauth/token",
        scope="openid",
        label="Example",
    )
    app = FastAPI()
    assert mount_console(app, str(_built(tmp_path)), oidc)
    client = TestClient(app)
    config = client.get("/console/config.json")
    assert config.json() == {"oidc": asdict(oidc)}
    for path in ("/", "/assets/app.js", "/console/config.json"):
        policy = client.get(path).headers["content-security-policy"]
        assert "connect-src 'self' https://tokens.example.com:8443;" in policy, path
    # without a provider: API keys only, and the page connects to itself alone
    app, _ = _app(str(_built(tmp_path / "again")))
    plain = TestClient(app)
    assert plain.get("/console/config.json").json() == {"oidc": None}
    assert "connect-src 'self';" in plain.get("/").headers["content-security-policy"]
