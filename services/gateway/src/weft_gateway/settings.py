"""Gateway settings."""

from __future__ import annotations

from pydantic import Field
from weft_platform.settings import ServiceSettings


class GatewaySettings(ServiceSettings):
    """Gateway settings (prefix ``WEFT_``)."""

    service_name: str = "gateway"
    http_port: int = 8080
    memory_url: str = "http://127.0.0.1:8085"
    agent_config_url: str = "http://127.0.0.1:8081"
    dev_api_key: str = Field(default="", description="Registered at start for dev_tenant if set.")
    dev_tenant: str = "demo"
    dev_user: str = "dev"
    stream_retention_s: int = Field(default=3600, ge=60, description="Redis Stream TTL.")
    stream_max_len: int = Field(default=10_000, ge=100, description="Events kept per session.")
    sse_ping_s: int = Field(default=15, ge=1, description="Heartbeat interval.")
    turn_idle_timeout_s: float = Field(
        default=600.0, gt=0, description="End an SSE stream with an error after this silence."
    )
