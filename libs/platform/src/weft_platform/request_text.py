"""Refuse request text that cannot be stored, for every route of every service at once.

A NUL character or a lone UTF-16 surrogate anywhere in a request's path, query string or
body (JSON at any depth, dict keys included; form fields) answers 422 naming the field,
before the route runs (see :mod:`weft_contracts.text` for why neither can be stored).

It is an app-level FastAPI dependency rather than a string type on each model: bodies
proxied as ``dict[str, Any]`` (agent definitions) have no model to annotate, and a new
route or field cannot forget a dependency it never declares. FastAPI has already decoded
and cached the body when dependencies run, so the check walks that value: no second parse,
and an escaped backslash (``"\\\\u0000"``, six harmless characters) is not mistaken for
an escape, which a scan of the raw bytes would have to handle.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from weft_contracts.text import Location, find_unstorable, unstorable_reason

ERROR_TYPE = "unstorable_text"


async def refuse_unstorable_text(request: Request) -> None:
    """Raise a 422 :class:`RequestValidationError` for the first unstorable string."""
    found = _in_params(request) or await _in_body(request)
    if found is not None:
        loc, reason = found
        raise RequestValidationError([{"type": ERROR_TYPE, "loc": loc, "msg": f"Text {reason}"}])


def _in_params(request: Request) -> tuple[Location, str] | None:
    places = (("path", request.path_params.items()), ("query", request.query_params.multi_items()))
    for place, items in places:
        for name, value in items:
            for text in (name, value):
                if isinstance(text, str) and (reason := unstorable_reason(text)) is not None:
                    return (place, name), reason
    return None


async def _in_body(request: Request) -> tuple[Location, str] | None:
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or route.body_field is None:
        return None  # the route ignores any body it is sent
    content_type = request.headers.get("content-type", "")
    if content_type.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        form = await request.form()  # cached by FastAPI, files already spooled
        fields = {
            name: value if isinstance(value, str) else {"filename": value.filename or ""}
            for name, value in form.multi_items()
        }
        return find_unstorable(fields, ("body",))
    if not await request.body():
        return None
    try:
        body = await request.json()  # the value FastAPI decoded and cached
    except ValueError:
        return None  # not JSON: FastAPI validates the raw body itself
    return find_unstorable(body, ("body",))
