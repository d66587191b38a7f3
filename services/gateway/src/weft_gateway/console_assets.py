"""The web console's built assets (``console/`` built into ``dist/``), served at ``/``.

Only two shapes of path are served, ``/`` (the page) and ``/assets/<name>`` (hashed
scripts and styles), so every other path keeps the API's own answers (a JSON 404 for an
unknown route). Every answer carries a Content-Security-Policy that allows no inline script
or style, no other origin, no plugin and no framing: the console renders model text, and a
sanitiser bug must still not run anything (docs/console.md, "Safe by construction")."""

from __future__ import annotations

from pathlib import Path

import structlog
from fastapi import APIRouter, FastAPI
from starlette.responses import FileResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data: blob:",
        "connect-src 'self'",
        "font-src 'self'",
        "manifest-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        "object-src 'none'",
        "frame-ancestors 'none'",
    ]
)
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

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(SECURITY_HEADERS)
        if response.status_code == 200:
            response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        return response


def mount_console(app: FastAPI, console_dir: str) -> bool:
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
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    @router.get("/index.html")
    async def console_page() -> FileResponse:
        # Not cached: a new build's page names new asset hashes.
        headers = {**SECURITY_HEADERS, "Cache-Control": "no-cache"}
        return FileResponse(index, media_type="text/html; charset=utf-8", headers=headers)

    app.include_router(router)
    if (root / "assets").is_dir():
        app.mount("/assets", ConsoleAssetFiles(directory=root / "assets"), name="console-assets")
    return True
