"""Test-control and probe endpoints: `/`, `/healthz`, `/readyz`, `/_script`, `/_reset`,
`/_requests`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from weft_scripted_llm.errors import error_response
from weft_scripted_llm.script import parse_script
from weft_scripted_llm.state import state_of

router = APIRouter()

DESCRIPTION = (
    "Weft scripted LLM: an OpenAI-compatible TEST DOUBLE. It is not a real model; it answers "
    "from a script or from the offline demo policy."
)


@router.get("/")
async def root(request: Request) -> dict[str, Any]:
    state = state_of(request)
    return {
        "name": "weft-scripted-llm",
        "kind": "test double",
        "description": DESCRIPTION,
        "policy": state.policy.name,
        "endpoints": [
            "POST /v1/chat/completions",
            "POST /v1/embeddings",
            "GET /v1/models",
            "POST /_script",
            "GET /_script",
            "POST /_reset",
            "GET /_requests",
        ],
    }


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz() -> dict[str, str]:
    return {"status": "ready"}


@router.post("/_script")
async def load_script(request: Request) -> Response:
    """Replace the policy by the script in the body (JSON), played from its first step."""
    state = state_of(request)
    try:
        script = parse_script(await request.json())
    except (ValueError, ValidationError) as exc:
        return error_response(400, f"scripted LLM: invalid script: {exc}")
    state.use_script(script)
    return JSONResponse(state.policy.status())


@router.get("/_script")
async def script_status(request: Request) -> dict[str, Any]:
    """The policy in use and, for a script, how many steps remain."""
    return state_of(request).policy.status()


@router.post("/_reset")
async def reset(request: Request) -> dict[str, Any]:
    """Back to the startup policy, request log emptied, stalled requests released."""
    state = state_of(request)
    state.reset()
    return state.policy.status()


@router.get("/_requests")
async def requests(request: Request) -> dict[str, Any]:
    """The requests received since start or the last reset, oldest first."""
    return {"requests": state_of(request).requests.entries()}
