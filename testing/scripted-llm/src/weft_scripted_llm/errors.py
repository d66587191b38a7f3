"""OpenAI-style error responses: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import math

from fastapi.responses import JSONResponse

from weft_scripted_llm.reply import ErrorFault

CONTEXT_WINDOW_TOKENS = 8192

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}
_CODES = {429: "rate_limit_exceeded"}


def error_type(status: int) -> str:
    """The OpenAI error type usual for an HTTP status."""
    return _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_response(
    status: int,
    message: str,
    *,
    type_: str | None = None,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {
        "error": {
            "message": message,
            "type": type_ or error_type(status),
            "param": param,
            "code": code,
        }
    }
    return JSONResponse(body, status_code=status, headers=headers)


def fault_headers(fault: ErrorFault) -> dict[str, str]:
    """`Retry-After` (seconds, rounded up), `retry-after-ms` and `x-should-retry`."""
    headers: dict[str, str] = {}
    if fault.retry_after is not None:
        headers["retry-after"] = str(math.ceil(fault.retry_after))
        headers["retry-after-ms"] = str(round(fault.retry_after * 1000))
    if fault.should_retry is not None:
        headers["x-should-retry"] = "true" if fault.should_retry else "false"
    return headers


def fault_response(fault: ErrorFault) -> JSONResponse:
    """The scripted error."""
    return error_response(
        fault.status,
        fault.message,
        type_=fault.type,
        code=fault.code or _CODES.get(fault.status),
        headers=fault_headers(fault),
    )


def context_overflow_response(prompt_tokens: int) -> JSONResponse:
    """400 `context_length_exceeded`, worded like OpenAI's."""
    message = (
        f"This model's maximum context length is {CONTEXT_WINDOW_TOKENS} tokens. However, your "
        f"messages resulted in {max(prompt_tokens, CONTEXT_WINDOW_TOKENS + 1)} tokens. "
        "Please reduce the length of the messages. (scripted LLM test double)"
    )
    return error_response(400, message, code="context_length_exceeded", param="messages")


def no_retry_error(status: int, message: str, code: str | None = None) -> JSONResponse:
    """An error the OpenAI client must not retry (for example: script exhausted)."""
    return error_response(status, message, code=code, headers={"x-should-retry": "false"})
