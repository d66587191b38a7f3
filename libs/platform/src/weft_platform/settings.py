"""Settings every service shares, read from the environment (prefix ``WEFT_``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_credentials_dir() -> str:
    home = os.environ.get("WEFT_HOME") or str(Path.cwd() / ".weft")
    return str(Path(home) / "credentials")


TracingExporter = Literal["none", "console", "otlp"]
"""``WEFT_TRACING_EXPORTER`` of the services that write spans (``weft_platform.tracing``)."""


class ServiceSettings(BaseSettings):
    """Connection and runtime settings common to every service.

    Services subclass it to add their own fields; build it in the app factory, never at
    import time (STYLE principle 7).
    """

    model_config = SettingsConfigDict(env_prefix="WEFT_", extra="ignore")

    service_name: str = Field(default="weft", description="Name in logs and Kafka client ids.")
    kafka_bootstrap: str = "127.0.0.1:19092"
    database_url: str = "postgresql+asyncpg://weft:weft@127.0.0.1:55432/weft"
    redis_url: str = "redis://127.0.0.1:56379/0"
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
    credentials_dev_keys: bool = Field(
        default=False,
        description="Generate missing key pairs into credentials_dir at start (development "
        "and tests only). Off: a service without its keys refuses to start.",
    )
