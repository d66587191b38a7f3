"""OAuth 2.1 for MCP servers (SPEC H-06): discovery (RFC 9728 protected-resource
metadata, RFC 8414 / OIDC authorisation-server metadata), dynamic client registration
(RFC 7591), the authorisation URL with PKCE S256, code exchange and refresh.

Every request goes through the caller's ``factory`` (the pinned one of
:mod:`weft_mcp_client.transport`): metadata documents name URLs the server chose, so each is
checked like the server's own URL. No redirect is followed.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    extract_resource_metadata_from_www_auth,
    extract_scope_from_www_auth,
    get_client_metadata_scopes,
)
from mcp.shared.auth import OAuthMetadata, OAuthToken, ProtectedResourceMetadata
from pydantic import ValidationError

from weft_mcp_client.transport import McpHttpClientFactory

OAUTH_TIMEOUT_S = 15.0
MAX_DOCUMENT_BYTES = 256_000
"""Largest metadata, registration or token document read (cut off while it streams)."""


class OAuthError(Exception):
    """Discovery, registration or a token request failed; ``str()`` says why."""


@dataclass
class OAuthClient:
    """Weft's client registration with one server's authorisation server."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    client_id: str
    client_secret: str | None = field(repr=False)
    redirect_uri: str
    scopes: str | None = None
    """Space-separated scopes asked for (None: the server's default)."""
    registration_endpoint: str | None = None


@dataclass
class OAuthTokens:
    """A user's tokens for one server."""

    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    expires_at: float | None
    """Epoch seconds; None: the server did not say."""
    token_type: str = "Bearer"
    scope: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def expired(self, *, leeway_s: float = 30.0, now: float | None = None) -> bool:
        """Whether the access token is (about to be) past its lifetime."""
        if self.expires_at is None:
            return False
        return (now if now is not None else time.time()) >= self.expires_at - leeway_s


def pkce_pair() -> tuple[str, str]:
    """A PKCE verifier (43+ unreserved characters) and its S256 challenge."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
    return verifier, challenge


def _challenge_response(www_authenticate: str | None) -> httpx.Response:
    # The SDK's parsers read a response; give them the one header they look at.
    headers = {"WWW-Authenticate": www_authenticate} if www_authenticate else {}
    return httpx.Response(401, headers=headers)


async def _bounded(
    client: httpx.AsyncClient, method: str, url: str, **kwargs: Any
) -> tuple[int, bytes | None]:
    """The status and body of a request, the body None when it is longer than
    :data:`MAX_DOCUMENT_BYTES`: read as it streams and given up past the cap, never held
    whole (a hostile metadata or token endpoint may send an endless body), within
    :data:`OAUTH_TIMEOUT_S` in all (httpx's timeouts are per read: a body dripped a byte
    at a time would outlast them)."""
    try:
        async with asyncio.timeout(OAUTH_TIMEOUT_S):
            async with client.stream(method, url, **kwargs) as response:
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > MAX_DOCUMENT_BYTES:
                    return response.status_code, None
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_DOCUMENT_BYTES:
                        return response.status_code, None
                return response.status_code, bytes(body)
    except TimeoutError:
        raise httpx.ReadTimeout(f"no whole answer within {OAUTH_TIMEOUT_S:g}s") from None


async def _get_json(client: httpx.AsyncClient, url: str) -> dict[str, Any] | None:
    """The JSON object at ``url``, or None when it is not there (4xx, not JSON)."""
    try:
        status, content = await _bounded(client, "GET", url, headers={"Accept": "application/json"})
    except httpx.HTTPError as exc:
        raise OAuthError(f"could not reach {url}: {type(exc).__name__}") from None
    if status >= 400 or content is None:
        return None
    try:
        body = json.loads(content)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


async def _resource_metadata(
    client: httpx.AsyncClient, server_url: str, www_authenticate: str | None
) -> ProtectedResourceMetadata | None:
    hinted = extract_resource_metadata_from_www_auth(_challenge_response(www_authenticate))
    for url in build_protected_resource_metadata_discovery_urls(hinted, server_url):
        body = await _get_json(client, url)
        if body is None:
            continue
        try:
            return ProtectedResourceMetadata.model_validate(body)
        except ValidationError:
            continue
    return None


async def _server_metadata(
    client: httpx.AsyncClient, auth_server: str | None, server_url: str
) -> OAuthMetadata:
    for url in build_oauth_authorization_server_metadata_discovery_urls(auth_server, server_url):
        body = await _get_json(client, url)
        if body is None:
            continue
        try:
            return OAuthMetadata.model_validate(body)
        except ValidationError:
            continue
    raise OAuthError("the server's authorization server publishes no OAuth metadata")


async def _register(
    client: httpx.AsyncClient, metadata: OAuthMetadata, redirect_uri: str, scopes: str | None
) -> tuple[str, str | None]:
    if metadata.registration_endpoint is None:
        raise OAuthError(
            "the authorization server offers no dynamic client registration; "
            "an operator has to register Weft as a client"
        )
    request: dict[str, Any] = {
        "client_name": "Weft",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "client_secret_post",
    }
    if scopes:
        request["scope"] = scopes
    try:
        status, content = await _bounded(
            client, "POST", str(metadata.registration_endpoint), json=request
        )
    except httpx.HTTPError as exc:
        raise OAuthError(f"client registration failed: {type(exc).__name__}") from None
    if status not in (200, 201):
        raise OAuthError(f"client registration answered HTTP {status}")
    if content is None:
        raise OAuthError(f"client registration answered more than {MAX_DOCUMENT_BYTES} bytes")
    try:
        body = json.loads(content)
    except ValueError:
        raise OAuthError("client registration answered something that is not JSON") from None
    client_id = body.get("client_id") if isinstance(body, dict) else None
    if not isinstance(client_id, str) or not client_id:
        raise OAuthError("client registration returned no client_id")
    secret = body.get("client_secret")
    return client_id, secret if isinstance(secret, str) and secret else None


async def discover_client(
    server_url: str,
    www_authenticate: str | None,
    redirect_uri: str,
    *,
    factory: McpHttpClientFactory,
    known: OAuthClient | None = None,
) -> OAuthClient:
    """Weft's OAuth client for the server at ``server_url``: the server's protected-resource
    metadata (from ``www_authenticate``'s ``resource_metadata``, else the well-known URLs),
    its authorisation server's metadata, then dynamic registration unless ``known`` is a
    registration with that same issuer and redirect URI (which is then reused)."""
    timeout = httpx.Timeout(OAUTH_TIMEOUT_S)
    async with factory(timeout=timeout) as client:
        resource = await _resource_metadata(client, server_url, www_authenticate)
        auth_server = str(resource.authorization_servers[0]) if resource else None
        metadata = await _server_metadata(client, auth_server, server_url)
        scopes = get_client_metadata_scopes(
            extract_scope_from_www_auth(_challenge_response(www_authenticate)), resource, metadata
        )
        methods = metadata.code_challenge_methods_supported
        if methods is not None and "S256" not in methods:
            raise OAuthError("the authorization server does not support PKCE S256")
        issuer = str(metadata.issuer)
        if known and known.issuer == issuer and known.redirect_uri == redirect_uri:
            client_id, secret = known.client_id, known.client_secret
        else:
            client_id, secret = await _register(client, metadata, redirect_uri, scopes)
    return OAuthClient(
        issuer=issuer,
        authorization_endpoint=str(metadata.authorization_endpoint),
        token_endpoint=str(metadata.token_endpoint),
        client_id=client_id,
        client_secret=secret,
        redirect_uri=redirect_uri,
        scopes=scopes,
        registration_endpoint=(
            str(metadata.registration_endpoint) if metadata.registration_endpoint else None
        ),
    )


def authorization_url(client: OAuthClient, *, state: str, challenge: str, resource: str) -> str:
    """Where the user goes to authorise Weft (authorisation code with PKCE S256; RFC 8707
    ``resource`` names the MCP server the token is for)."""
    params = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": client.redirect_uri,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": resource,
    }
    if client.scopes:
        params["scope"] = client.scopes
    separator = "&" if "?" in client.authorization_endpoint else "?"
    return f"{client.authorization_endpoint}{separator}{urlencode(params)}"


async def _token_request(
    client: OAuthClient, form: dict[str, str], factory: McpHttpClientFactory
) -> OAuthTokens:
    form = {**form, "client_id": client.client_id}
    if client.client_secret:
        form["client_secret"] = client.client_secret
    async with factory(timeout=httpx.Timeout(OAUTH_TIMEOUT_S)) as http:
        try:
            status, content = await _bounded(
                http, "POST", client.token_endpoint, data=form,
                headers={"Accept": "application/json"},
            )  # fmt: skip
        except httpx.HTTPError as exc:
            raise OAuthError(f"the token endpoint failed: {type(exc).__name__}") from None
    if status != 200:
        raise OAuthError(f"the token endpoint answered HTTP {status}")
    if content is None:
        raise OAuthError(f"the token endpoint answered more than {MAX_DOCUMENT_BYTES} bytes")
    try:
        token = OAuthToken.model_validate_json(content)
    except ValidationError:
        raise OAuthError("the token endpoint answered something that is not a token") from None
    expires = time.time() + token.expires_in if token.expires_in is not None else None
    return OAuthTokens(
        access_token=token.access_token,
        refresh_token=token.refresh_token,
        expires_at=expires,
        token_type=token.token_type,
        scope=token.scope,
    )


async def exchange_code(
    client: OAuthClient, *, code: str, verifier: str, resource: str, factory: McpHttpClientFactory
) -> OAuthTokens:
    """The user's tokens for the authorisation ``code`` (PKCE: the ``verifier``)."""
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": client.redirect_uri,
        "code_verifier": verifier,
        "resource": resource,
    }
    return await _token_request(client, form, factory)


async def refresh(
    client: OAuthClient, tokens: OAuthTokens, *, resource: str, factory: McpHttpClientFactory
) -> OAuthTokens:
    """New tokens from ``tokens``' refresh token (the old refresh token is kept when the
    server does not rotate it). Raises :class:`OAuthError` when there is none."""
    if not tokens.refresh_token:
        raise OAuthError("no refresh token: the user has to authorise again")
    form = {
        "grant_type": "refresh_token",
        "refresh_token": tokens.refresh_token,
        "resource": resource,
    }
    fresh = await _token_request(client, form, factory)
    if fresh.refresh_token is None:
        fresh.refresh_token = tokens.refresh_token
    return fresh
