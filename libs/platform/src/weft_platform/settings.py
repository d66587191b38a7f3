"""Settings every service shares, read from the environment (prefix ``WEFT_``)."""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any, Literal, Self

from aiokafka.helpers import create_ssl_context
from faststream.security import BaseSecurity, SASLScram512
from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_credentials_dir() -> str:
    home = os.environ.get("WEFT_HOME") or str(Path.cwd() / ".weft")
    return str(Path(home) / "credentials")


TracingExporter = Literal["none", "console", "otlp", "file"]
"""``WEFT_TRACING_EXPORTER``: where every service's spans go (``weft_platform.tracing``)."""

OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
"""The standard variables whose presence alone turns the OTLP exporter on."""


KafkaSecurityProtocol = Literal["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL"]
"""``WEFT_KAFKA_SECURITY_PROTOCOL``: how every Kafka client of a process connects."""


class KafkaAccess(BaseSettings):
    """Where the Kafka broker is and who this process is to it (``WEFT_KAFKA_*``).

    Every Kafka client of Weft is built from these: the FastStream broker
    (:meth:`faststream_security`) and the direct aiokafka clients (:meth:`client_options`).
    SASL always uses SCRAM-SHA-512: each service is its own principal, and the broker's ACLs
    say what that principal may read and write (docs/security.md, "Kafka").
    """

    model_config = SettingsConfigDict(env_prefix="WEFT_", extra="ignore")

    kafka_bootstrap: str = "127.0.0.1:19092"
    kafka_security_protocol: KafkaSecurityProtocol = "PLAINTEXT"
    kafka_sasl_mechanism: Literal["SCRAM-SHA-512"] = "SCRAM-SHA-512"
    kafka_username: str = Field(default="", description="SCRAM user (the Kafka principal).")
    kafka_password: SecretStr = SecretStr("")
    kafka_ssl_cafile: str = Field(default="", description="CA bundle that signed the broker.")
    kafka_ssl_certfile: str = Field(default="", description="Client certificate (mutual TLS).")
    kafka_ssl_keyfile: str = Field(default="", description="Key of the client certificate.")

    @model_validator(mode="after")
    def _sasl_needs_credentials(self) -> Self:
        if self.uses_sasl and not (self.kafka_username and self.kafka_password.get_secret_value()):
            raise ValueError(
                f"WEFT_KAFKA_SECURITY_PROTOCOL={self.kafka_security_protocol} needs "
                "WEFT_KAFKA_USERNAME and WEFT_KAFKA_PASSWORD"
            )
        return self

    @property
    def uses_sasl(self) -> bool:
        """The connection authenticates with SCRAM."""
        return self.kafka_security_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        """The connection is encrypted (and the broker's certificate checked)."""
        return self.kafka_security_protocol in ("SSL", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of the connection (None without TLS)."""
        if not self.uses_tls:
            return None
        context: ssl.SSLContext = create_ssl_context(
            cafile=self.kafka_ssl_cafile or None,
            certfile=self.kafka_ssl_certfile or None,
            keyfile=self.kafka_ssl_keyfile or None,
        )
        return context

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments of any aiokafka client (producer, consumer, admin)."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.kafka_bootstrap,
            "security_protocol": self.kafka_security_protocol,
        }
        if self.uses_tls:
            options["ssl_context"] = self.ssl_context()
        if self.uses_sasl:
            options["sasl_mechanism"] = self.kafka_sasl_mechanism
            options["sasl_plain_username"] = self.kafka_username
            options["sasl_plain_password"] = self.kafka_password.get_secret_value()
        return options

    def faststream_security(self) -> BaseSecurity | None:
        """The same, as FastStream's ``security=`` of a ``KafkaBroker``."""
        if self.uses_sasl:
            return SASLScram512(
                self.kafka_username,
                self.kafka_password.get_secret_value(),
                ssl_context=self.ssl_context(),
                use_ssl=self.uses_tls,
            )
        if self.uses_tls:
            return BaseSecurity(ssl_context=self.ssl_context(), use_ssl=True)
        return None


class ServiceSettings(KafkaAccess):
    """Connection and runtime settings common to every service.

    Services subclass it to add their own fields; build it in the app factory, never at
    import time (STYLE principle 7).
    """

    model_config = SettingsConfigDict(env_prefix="WEFT_", extra="ignore")

    service_name: str = Field(default="weft", description="Name in logs and Kafka client ids.")
    database_url: str = "postgresql+asyncpg://weft:weft@127.0.0.1:15432/weft"
    redis_url: str = "redis://127.0.0.1:16379/0"
    redis_health_check_s: int = Field(
        default=5,
        ge=1,
        description="A pooled Redis connection idle this long is pinged before reuse (and "
        "replaced if dead), as PostgreSQL's pool pre-pings: a Redis restart fails no request.",
    )
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    log_level: str = "INFO"
    log_format: Literal["json", "console"] = "console"
    consumer_attempts: int = Field(default=3, ge=1, description="Tries before dead-lettering.")
    consumer_retry_backoff_s: float = Field(default=0.2, ge=0)
    dedupe_ttl_s: int = Field(default=24 * 3600, ge=60, description="Processed-id memory.")
    commit_interval_ms: int = Field(
        default=200,
        ge=0,
        description="Handled records' offsets are committed together at most this often "
        "(0: after every record). A crash hands back up to this much of handled records.",
    )
    publish_window_s: float = Field(
        default=60.0,
        gt=1,
        description="How long a publish waits out a broker outage: the producer resends "
        "a record every retry_backoff until its ack comes or it is this old (aiokafka's "
        "request_timeout_ms); then the publish fails. Above a broker restart (5-30 s).",
    )
    redelivery_backoff_max_s: float = Field(
        default=5.0,
        gt=0,
        description="Cap of the pause before a record whose handling (or dead-lettering) "
        "failed is read again; pauses double from consumer_retry_backoff_s.",
    )
    readiness_timeout_s: float = Field(default=2.0, gt=0)
    readiness_grace_s: float = Field(
        default=30.0,
        ge=0,
        description="How long Kafka, PostgreSQL or Redis, once reached, may fail before "
        "/readyz does (meanwhile it answers 200 'degraded' and requests that need the "
        "dependency 503 with Retry-After): a blip does not take every replica out of its "
        "Service at once. 0: /readyz fails at the first failed check.",
    )
    drain_delay_s: float = Field(
        default=0.0,
        ge=0,
        le=300,
        description="After SIGTERM the process answers /readyz 503 'draining' at once and "
        "goes on serving this long before it stops listening and shuts down (a second "
        "signal ends the wait). 0: shut down at once (a Kubernetes preStop sleep plays "
        "the same part before the signal).",
    )
    instance_id: str = Field(default="", description="Replica name; defaults to host:pid.")
    topic_prefix: str = Field(
        default="",
        description="Prepended to every topic and consumer group name: isolates test stacks.",
    )
    credentials_dir: str = Field(
        default_factory=_default_credentials_dir,
        description="Service credential keys (weft_platform.credentials): <issuer>.<kid>.pub "
        "for every verifier, <issuer>.<kid>.key only on that issuer. Default "
        "$WEFT_HOME/credentials.",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Port of this process's Prometheus metrics (never an API port). 0: "
        "metrics off; unset: http_port + 1000.",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        description="Address the metrics port binds (0.0.0.0 in containers: the chart and "
        "compose set it).",
    )
    metrics_tenant_label: bool = Field(
        default=False,
        description="Label the turn, tool-call and budget counters with the tenant (at most "
        "metrics_tenant_label_max distinct values; later tenants count as 'other').",
    )
    metrics_tenant_label_max: int = Field(
        default=50, ge=1, le=1000, description="Cap of distinct tenant label values."
    )
    credentials_dev_keys: bool = Field(
        default=False,
        description="Generate missing key pairs into credentials_dir at start (development "
        "and tests only). Off: a service without its keys refuses to start.",
    )
    tracing_exporter: TracingExporter = Field(
        default_factory=lambda: (
            "otlp" if any(os.environ.get(v) for v in OTLP_ENDPOINT_VARIABLES) else "none"
        ),
        description="Where spans go: none (trace ids for logs and propagation only, no span "
        "recorded), otlp (OTLP over HTTP, the standard OTEL_EXPORTER_OTLP_* variables; the "
        "default when OTEL_EXPORTER_OTLP_ENDPOINT is set), console (stdout), file "
        "(tracing_file, one JSON span a line: tests).",
    )
    tracing_sample_ratio: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="Share of new traces recorded: ParentBased(TraceIdRatioBased(ratio)); a "
        "trace continued from a caller follows the caller's sampled flag.",
    )
    tracing_file: str = Field(default="", description="The span file of exporter 'file'.")
    tracing_trust_incoming: bool = Field(
        default=True,
        description="Continue the trace of an HTTP request's traceparent header (and take "
        "its x-weft-request-id / x-weft-tenant-id for logs). Internal services: yes; the "
        "public gateway: no (a client could force every request to be sampled).",
    )
    access_log: bool = Field(
        default=False,
        description="One log line per HTTP request: method, route template, status, "
        "duration (never the path's values, the query string or a header).",
    )

    @property
    def effective_metrics_port(self) -> int:
        """The metrics port this process serves on (0: none)."""
        if self.metrics_port is None:
            return self.http_port + 1000
        return self.metrics_port


class ModelClientSettings(ServiceSettings):
    """A service that calls an OpenAI-compatible model besides the engine (memory's
    extraction, suggestions); the variables are the ``openai`` package's names."""

    openai_base_url: str = Field(
        default="http://127.0.0.1:8090/v1",
        validation_alias=AliasChoices("OPENAI_BASE_URL", "WEFT_OPENAI_BASE_URL"),
    )
    openai_api_key: str = Field(
        default="scripted-llm-test-double",
        validation_alias=AliasChoices("OPENAI_API_KEY", "WEFT_OPENAI_API_KEY"),
    )
    llm_model: str = Field(
        default="weft-scripted", validation_alias=AliasChoices("WEFT_LLM_MODEL", "LLM_MODEL")
    )
