"""The web console's built assets (``console/`` built into ``dist/``), served at ``/``.

Only these paths are served: ``/`` (the page), ``/assets/<name>`` (hashed scripts and
styles) and ``/console/config.json`` (how to sign in: the identity provider's public
settings, when the deployment has one), so every other path keeps the API's own answers
(a JSON 404 for an unknown route). Every answer carries a Content-Security-Policy that
allows no inline script or style, no other origin (but the identity provider's token
endpoint, when set), no plugin and no framing: the console renders model text, and a
sanitiser bug must still not run anything (docs/console.md, "Safe by construction")."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

import structlog
from fastapi import APIRouter, FastAPI
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from weft_gateway.settings import GatewaySettings


def content_security_policy(connect_origins: tuple[str, ...] = ()) -> str:
    """The console's policy; ``connect_origins``: the identity provider's token endpoint,
    which the browser calls itself (OIDC with PKCE), besides the gateway."""
    return "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data: blob:",
            " ".join(["connect-src 'self'", *connect_origins]),
            "font-src 'self'",
            "manifest-src 'self'",
            "form-action 'self'",
            "base-uri 'none'",
            "object-src 'none'",
            "frame-ancestors 'none'",
        ]
    )


CONTENT_SECURITY_POLICY = content_security_policy()


@dataclass(frozen=True)
class OidcSignIn:
    """The console's identity-provider sign-in, as the browser needs it (all public)."""

    issuer: str
    client_id: str
    authorize_url: str
    token_url: str
    scope: str
    label: str

    def token_origin(self) -> str:
        """The token endpoint's origin, the one other place the page may connect to."""
        parts = urlsplit(self.token_url)
        return f"{parts.scheme}://{parts.netloc}"


def console_sign_in(s: GatewaySettings) -> OidcSignIn | None:
    """The OIDC settings when all of them are set; None (API keys only) otherwise."""
    values = (s.console_oidc_issuer, s.console_oidc_client_id, s.console_oidc_authorize_url,
              s.console_oidc_token_url)  # fmt: skip
    if not all(values):
        return None
    return OidcSignIn(*values, scope=s.console_oidc_scope, label=s.console_oidc_label)


SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}
log = structlog.get_logger(__name__)


class ConsoleAssetFiles(StaticFiles):
    """``/assets``: content-hashed names, so cached for good, with the security headers."""

    def __init__(self, *, directory: Path, headers: dict[str, str]) -> None:
        super().__init__(directory=directory)
        self.security_headers = headers

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(self.security_headers)
        if response.status_code == 200:
            response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        return response


def mount_console(app: FastAPI, console_dir: str, oidc: OidcSignIn | None = None) -> bool:
    """Serve the console from ``console_dir`` (a Vite ``dist``); nothing when it is empty.
    A directory without ``index.html`` (not built) is logged and skipped: a missing console
    never keeps the API from starting. True when the console is served."""
    if not console_dir:
        return False
    root = Path(console_dir)
    index = root / "index.html"
    if not index.is_file():
        log.warning("console_not_built", console_dir=console_dir,
                    hint="deploy/local/ensure-console.sh builds it")  # fmt: skip
        return False
    policy = content_security_policy((oidc.token_origin(),) if oidc else ())
    secured = {**SECURITY_HEADERS, "Content-Security-Policy": policy}
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    @router.get("/index.html")
    async def console_page() -> FileResponse:
        # Not cached: a new build's page names new asset hashes.
        headers = {**secured, "Cache-Control": "no-cache"}
        return FileResponse(index, media_type="text/html; charset=utf-8", headers=headers)

    @router.get("/console/config.json")
    async def console_config() -> JSONResponse:
        """How the console may sign in: API keys always, the identity provider when set."""
        body = {"oidc": asdict(oidc) if oidc else None}
        return JSONResponse(body, headers={**secured, "Cache-Control": "no-cache"})

    app.include_router(router)
    if (root / "assets").is_dir():
        files = ConsoleAssetFiles(directory=root / "assets", headers=secured)
        app.mount("/assets", files, name="console-assets")
    return True
