"""Gateway settings."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator
from weft_platform.budgets import TokenBudgetSettings


class GatewaySettings(TokenBudgetSettings):
    """Gateway settings (prefix ``WEFT_``)."""

    service_name: str = "gateway"
    http_port: int = 8080
    access_log: bool = Field(default=True, description="One line per public API request.")
    tracing_trust_incoming: bool = Field(
        default=False,
        description="Continue a client's traceparent (off: every request starts a trace, so "
        "no client can force its requests to be sampled).",
    )
    memory_url: str = "http://127.0.0.1:8085"
    agent_config_url: str = "http://127.0.0.1:8081"
    suggestions_url: str = "http://127.0.0.1:8086"
    sandbox_url: str = "http://127.0.0.1:8084"
    knowledge_url: str = "http://127.0.0.1:8088"
    attachment_max_bytes: int = Field(
        default=10 * 1024 * 1024, ge=1, description="Largest session attachment (413 above)."
    )
    attachment_types: list[str] = Field(
        default=["csv", "tsv", "txt", "md", "json", "jsonl", "xml", "yaml", "yml", "html",
                 "py", "sql", "log", "pdf", "xlsx", "xls", "docx", "pptx", "png", "jpg",
                 "jpeg", "gif", "webp", "zip", "parquet"],
        description="File name extensions a session attachment may have (415 otherwise).",
    )  # fmt: skip
    document_wait_s: float = Field(
        default=10.0,
        ge=0,
        description="How long POST .../documents waits for its text to be ingested (201 "
        "ready) before it answers 202 pending.",
    )
    console_dir: str = Field(
        default="",
        description="The web console's built assets (console/dist), served at / with a strict "
        "Content-Security-Policy; empty: no console (docs/console.md).",
    )
    console_oidc_issuer: str = Field(
        default="",
        description="The console's identity-provider sign-in (OIDC authorization code + "
        "PKCE, in the browser): the provider's issuer, which a tenant's identity_provider "
        "names; empty: API-key sign-in only (docs/console.md).",
    )
    console_oidc_client_id: str = Field(default="", description="The console's public client.")
    console_oidc_authorize_url: str = Field(default="", description="The authorization endpoint.")
    console_oidc_token_url: str = Field(
        default="", description="The token endpoint (called by the browser: CORS on the provider)."
    )
    console_oidc_scope: str = Field(default="openid", description="Scopes asked for.")
    console_oidc_label: str = Field(default="your organisation", description="Shown on the button.")
    dev_api_key: str = Field(default="", description="Registered at start for dev_tenant if set.")
    dev_tenant: str = "demo"
    dev_user: str = "dev"
    stream_retention_s: int = Field(default=3600, ge=60, description="Redis Stream TTL.")
    stream_max_len: int = Field(default=10_000, ge=100, description="Events kept per session.")
    sse_ping_s: int = Field(default=15, ge=1, description="Heartbeat interval.")
    turn_idle_timeout_s: float = Field(
        default=600.0, gt=0, description="End an SSE stream with an error after this silence."
    )
    stream_store_wait_s: float = Field(
        default=15.0,
        ge=0,
        description="A stream opened or resumed while the stream store (Redis) does not "
        "answer waits this long for it (a restart takes seconds) before it ends with "
        "stream_unavailable.",
    )
    sse_send_timeout_s: float = Field(
        default=10.0, gt=0, description="Drop an SSE client that cannot take an event this long."
    )
    sse_buffer_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="Bytes waiting for one SSE client (beyond its socket buffer) before it is "
        "dropped as too slow.",
    )
    rate_limit_per_minute: int = Field(
        default=600, ge=0, description="API requests per tenant per minute (0 = unlimited)."
    )
    max_concurrent_turns: int = Field(default=20, ge=1, description="Running turns per tenant.")
    turn_slot_ttl_s: int = Field(
        default=3600, ge=60, description="A running-turn slot is forgotten after this long."
    )
    chat_image_max_count: int = Field(
        default=4, ge=0, le=32, description="Images per chat request (SPEC E-26)."
    )
    chat_image_max_bytes: int = Field(
        default=384 * 1024, ge=1024, description="Decoded size of one data: URI image."
    )
    chat_images_max_total_chars: int = Field(
        default=700_000,
        ge=1024,
        description="All image references of a request together; the command must stay "
        "under Kafka's record size (1 MiB by default).",
    )
    max_body_bytes: int = Field(default=20 * 1024 * 1024, ge=1024, description="413 above this.")
    auth_cache_s: float = Field(
        default=30.0, ge=0, description="API key lookups cached this long (revocation delay)."
    )
    projector: Literal["embedded", "off"] = Field(
        default="embedded",
        description="embedded: this process also projects agent.events into Redis; off: a "
        "separate `python -m weft_gateway projector` process does.",
    )
    projector_batch_max: int = Field(
        default=500, ge=1, le=10_000, description="Kafka records per projector batch."
    )
    projector_rebuild_s: float = Field(
        default=300.0,
        ge=0,
        description="When Redis lost the session streams, the projector writes this much "
        "of the recent agent.events log again, under the ids the events had, so clients "
        "still get the events Redis held that they had not read.",
    )
    session_cache_ttl_s: int = Field(
        default=60,
        ge=1,
        description="Session ownership facts (tenant, user, agent) are kept in Redis this "
        "long; updates and deletes through any gateway replace them at once, so this only "
        "bounds changes made behind the gateway's back.",
    )
    session_lookup_timeout_s: float = Field(
        default=2.0,
        gt=0,
        description="Timeout of the chat path's session lookup in memory on a cache miss; "
        "past it the request is 503 with Retry-After.",
    )
    internal_timeout_s: float = Field(
        default=10.0, gt=0, description="Timeout of other calls to memory and agent-config."
    )
    internal_retry_window_s: float = Field(
        default=5.0,
        ge=0,
        description="Calls to memory and agent-config that fail to connect, time out or "
        "get a 5xx are tried again this long (idempotent ones; a create only when it "
        "never left), then answered 503 with Retry-After: the gateway holds a caller's "
        "request, so it absorbs a blip and leaves a restart to the caller's retry.",
    )
    purge_timeout_s: float = Field(
        default=300.0,
        gt=0,
        le=3600,
        description="Timeout of one owner's answer to a tenant or user purge (it deletes in "
        "batches until done; a purge cut short is finished by the next request).",
    )
    api_credential_ttl_s: float = Field(
        default=120.0,
        gt=0,
        description="Life of the request credential the gateway's internal calls carry "
        "for one API request (weft_platform.credentials).",
    )
    turn_deadline_s: float = Field(
        default=20 * 60,
        gt=0,
        description="SPEC E-20: a turn must have ended this long after its request (the "
        "engine's WEFT_TURN_DEADLINE_S, the same variable: set it once for both). The "
        "ChatRequested carries the moment, and the turn's credential, which the engine and "
        "tool workers forward on the turn's calls and records (so every subscriber of "
        "agent.events sees it), expires then: a copy read off a record is useless once the "
        "turn is over.",
    )
    approval_body_max_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description="Largest body of the approval routes (a decision with edited "
        "arguments, a grant): 413 above.",
    )
    approval_lookup_wait_s: float = Field(
        default=5.0,
        ge=0,
        description="A decision with edited arguments on a prompt memory has not recorded "
        "yet waits this long for it (the prompt's tool names the argument model).",
    )
    access_cap_cache_s: float = Field(
        default=30.0,
        ge=0,
        description="A tenant's max_access_level is read at most this often per gateway.",
    )
    turn_renewal_max_age_s: float = Field(
        default=8 * 86400,
        gt=0,
        description="POST /internal/turn-credentials/renew refuses a turn credential "
        "issued longer ago than this (a prompt waits at most 7 days plus escalation).",
    )
    internal_max_connections: int = Field(
        default=200, ge=10, description="Connection pool of each internal HTTP client."
    )
    redis_max_connections: int = Field(default=200, ge=10, description="Gateway Redis pool.")
    redis_wait_s: float = Field(default=30.0, gt=0, description="Wait for a pooled connection.")
    # Administration (docs/admin.md).
    admin_token_sha256: str = Field(
        default="",
        description="SHA-256 hex digests of the operator tokens of /admin/v1, "
        "comma-separated (several: rotation with an overlap); empty: no admin API (404).",
    )
    admin_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="A second port of this process (on http_host) that alone serves "
        "/admin/v1; the public port answers those paths 404 (weft_gateway.admin_port). "
        "Unset: the public port serves the admin API too.",
    )
    maintenance_interval_s: float = Field(
        default=3600.0,
        ge=0,
        description="Period of the maintenance job (unfinished tenant deletions, retention); "
        "one gateway runs each period; 0: never.",
    )
    purge_watch_s: float = Field(
        default=86400.0,
        ge=0,
        description="For this long after a tenant's deletion finished, the maintenance job "
        "deletes whatever late records of it wrote again, and its id cannot be created again "
        "(409), so no late record of the old tenant can land in a new one's data.",
    )
    end_user_issuer_cache_s: float = Field(
        default=30.0, ge=0, description="Issuer -> tenant lookups of end-user JWTs cached."
    )
    end_user_jwks_cache_s: float = Field(
        default=300.0, ge=0, description="A tenant identity provider's JWK set is kept this long."
    )
    end_user_leeway_s: float = Field(
        default=30.0, ge=0, le=300, description="Clock skew allowed on exp/nbf of end-user JWTs."
    )
    end_user_max_token_lifetime_s: float = Field(
        default=24 * 3600,
        ge=60,
        description="Longest end-user JWT accepted: exp at most this long after iat (or, "
        "without iat, after the moment it is presented), else 401. An identity provider's "
        "max_token_lifetime_s overrides it for that provider's tokens.",
    )
    sse_max_per_tenant: int = Field(
        default=200,
        ge=0,
        description="Open SSE streams per tenant across all gateway replicas (0: no cap); "
        "one more is 429.",
    )
    sse_lease_s: float = Field(
        default=30.0,
        ge=3,
        description="A stream's slot lease, renewed every third of it: the slots of a "
        "killed gateway come back within this.",
    )
    header_read_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="A connection whose request headers are not complete this long after "
        "it opened (or after the request's first byte) is closed (slowloris).",
    )

    @model_validator(mode="after")
    def _admin_port_is_its_own(self) -> Self:
        if self.admin_port is not None and self.admin_port in (
            self.http_port,
            self.effective_metrics_port,
        ):
            raise ValueError("WEFT_ADMIN_PORT must differ from the HTTP and metrics ports")
        return self
