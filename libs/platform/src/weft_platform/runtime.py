"""The connections one service process holds, built once in its app factory."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from faststream.kafka import KafkaBroker
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from weft_platform.bus import EventBus, create_broker
from weft_platform.credentials import (
    GATEWAY,
    CredentialSigner,
    CredentialVerifier,
    ensure_dev_keys,
    load_signer,
    load_verifier,
)
from weft_platform.readiness import DependencyGrace, Readiness
from weft_platform.record_credentials import RecordCheck
from weft_platform.redis_client import redis_client
from weft_platform.settings import ServiceSettings


@dataclass(kw_only=True)
class ServiceRuntime:
    """Kafka, PostgreSQL and Redis handles of one process, shared by its handlers."""

    settings: ServiceSettings
    """The service's settings (a subclass of ServiceSettings)."""
    broker: KafkaBroker
    """FastStream broker; subscribers are registered before the app starts."""
    bus: EventBus
    """Publishing and consuming Weft envelopes through ``broker``."""
    database: AsyncEngine | None
    """SQLAlchemy async engine (asyncpg); None for a service that opens no database
    (the engine: its state is in Redis, what it needs of a table comes with the turn)."""
    redis: Redis
    """Redis client (decoded responses off: values are bytes)."""
    verifier: CredentialVerifier
    """Verifies the credentials of internal calls and consumed records."""
    readiness: Readiness
    """The readiness grace of the shared dependencies and the drain flag (``/readyz``)."""
    _sessions: async_sessionmaker[AsyncSession] | None = None

    @property
    def db(self) -> AsyncEngine:
        """The database engine; RuntimeError in a service built without one."""
        if self.database is None:
            raise RuntimeError(f"{self.settings.service_name} opens no database")
        return self.database

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]:
        """Factory of ORM sessions bound to ``db``."""
        if self._sessions is None:
            self._sessions = async_sessionmaker(self.db, expire_on_commit=False)
        return self._sessions

    def signer(self, issuer: str) -> CredentialSigner:
        """The signer of ``issuer`` (its private key must be in ``credentials_dir``)."""
        return load_signer(Path(self.settings.credentials_dir), issuer)

    @property
    def instance_id(self) -> str:
        """This replica's name, for logs and tool results."""
        return self.settings.instance_id or f"{socket.gethostname()}:{os.getpid()}"


def create_runtime(settings: ServiceSettings, *, database: bool = True) -> ServiceRuntime:
    """Create (not yet connect) the clients of one service process; refuses to start
    without the credential keys (``MissingKeys``) unless ``credentials_dev_keys``.
    ``database=False``: no PostgreSQL engine at all (no pool, no readiness check)."""
    verifier = credential_verifier(settings)
    broker = create_broker(settings)
    redis = redis_client(settings.redis_url, health_check_s=settings.redis_health_check_s)
    return ServiceRuntime(
        settings=settings,
        broker=broker,
        bus=EventBus(broker, settings, redis, records=RecordCheck(verifier)),
        database=database_engine(settings.database_url) if database else None,
        redis=redis,
        verifier=verifier,
        readiness=Readiness(grace=DependencyGrace(grace_s=settings.readiness_grace_s)),
    )


def database_engine(url: str) -> AsyncEngine:
    """A service's PostgreSQL pool: 5 connections (5 more in bursts), each pinged when
    checked out, so that a connection a database restart closed is replaced, not used."""
    return create_async_engine(url, pool_size=5, max_overflow=5, pool_pre_ping=True)


DEV_ISSUERS = (
    GATEWAY, "engine", "suggestions", "memory", "knowledge", "agent-config", "tool-exec",
    "operator",
)  # fmt: skip
"""Key pairs development and tests generate: request credentials (gateway), the engine's,
the suggestions service's, memory's (approval expiries), knowledge's (ingestion usage sent
to memory), agent-config's (knowledge bases and titles it asks knowledge for) and
tool-exec's (a shared agent's knowledge reads) service credentials, and the operator's
(admin routes, tests)."""


def credential_verifier(settings: ServiceSettings) -> CredentialVerifier:
    """The key set of ``settings.credentials_dir`` (generated first in development)."""
    directory = Path(settings.credentials_dir)
    if settings.credentials_dev_keys:
        ensure_dev_keys(directory, DEV_ISSUERS)
    return load_verifier(directory)
