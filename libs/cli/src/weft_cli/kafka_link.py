"""Kafka connections of ``weft``: each command group logs in as its own principal (the
user and password of ``WEFT_KAFKA_*``), and the broker's refusals become exit codes with a
sentence saying which principal the command expects (docs/security.md, "Kafka")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
)

from weft_cli.outcome import CommandFailed, ExitCode
from weft_cli.settings import KafkaSettings

REFUSED = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    ClusterAuthorizationFailedError,
    SaslAuthenticationFailed,
    AuthenticationFailedError,
)
REQUEST_TIMEOUT_MS = 15_000


def who(settings: KafkaSettings) -> str:
    """The login in use, for messages (never the password)."""
    return settings.kafka_username or "anonymous (no WEFT_KAFKA_USERNAME)"


def refused(settings: KafkaSettings, principal: str, exc: Exception) -> CommandFailed:
    """The failure of a request the broker refused for who asked."""
    return CommandFailed(
        f"Kafka refused {type(exc).__name__} for {who(settings)}: this command runs as "
        f"{principal!r} (set WEFT_KAFKA_USERNAME/WEFT_KAFKA_PASSWORD to its login; its "
        "ACLs are in docs/security.md)",
        ExitCode.AUTH,
    )


def translate(settings: KafkaSettings, principal: str, exc: KafkaError) -> CommandFailed:
    """A Kafka error as the operator sees it."""
    if isinstance(exc, REFUSED):
        return refused(settings, principal, exc)
    if isinstance(exc, KafkaConnectionError):
        text = str(exc)
        if "auth" in text.lower() or "sasl" in text.lower():
            return refused(settings, principal, exc)
        return CommandFailed(
            f"Kafka at {settings.kafka_bootstrap} not reachable as {who(settings)}: {text} "
            "(WEFT_KAFKA_BOOTSTRAP; a wrong password also ends the connection)",
            ExitCode.UNREACHABLE,
        )
    return CommandFailed(f"Kafka: {type(exc).__name__}: {exc}", ExitCode.FAILED)


@asynccontextmanager
async def kafka_errors(settings: KafkaSettings, principal: str) -> AsyncIterator[None]:
    """Turn every Kafka error raised inside into :class:`CommandFailed`."""
    try:
        yield
    except KafkaError as exc:
        raise translate(settings, principal, exc) from exc


@asynccontextmanager
async def admin_client(
    settings: KafkaSettings, principal: str
) -> AsyncIterator[AIOKafkaAdminClient]:
    """A started admin client (closed on exit); errors translated."""
    async with kafka_errors(settings, principal):
        admin = AIOKafkaAdminClient(
            **settings.client_options(), request_timeout_ms=REQUEST_TIMEOUT_MS
        )
        try:
            await admin.start()
            yield admin
        finally:
            await admin.close()
