"""Kafka connections of ``weft``: each command group logs in as its own principal (the
user and password of ``WEFT_KAFKA_*``), and the broker's refusals become exit codes with a
sentence saying which principal the command expects (docs/security.md, "Kafka")."""

from __future__ import annotations

import logging
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


class _LoginFailures(logging.Handler):
    """aiokafka reports a refused SASL login only in a log line and then raises a plain
    "unable to bootstrap" connection error; this handler keeps that line (and keeps
    aiokafka's own log lines off the operator's terminal) so the failure is named as a
    login problem (exit 3), not an unreachable broker (exit 4)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "Authentication" in text or "Sasl" in text:
            self.last = text


_LOGINS = _LoginFailures()
_AIOKAFKA_LOG = logging.getLogger("aiokafka")


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
        if _LOGINS.last is not None:
            return CommandFailed(
                f"Kafka refused the login of {who(settings)} ({_LOGINS.last[-200:]}); this "
                f"command runs as {principal!r}: check WEFT_KAFKA_USERNAME/WEFT_KAFKA_PASSWORD",
                ExitCode.AUTH,
            )
        return CommandFailed(
            f"Kafka at {settings.kafka_bootstrap} not reachable as {who(settings)}: {text} "
            "(WEFT_KAFKA_BOOTSTRAP; a wrong password also ends the connection)",
            ExitCode.UNREACHABLE,
        )
    return CommandFailed(f"Kafka: {type(exc).__name__}: {exc}", ExitCode.FAILED)


@asynccontextmanager
async def kafka_errors(settings: KafkaSettings, principal: str) -> AsyncIterator[None]:
    """Turn every Kafka error raised inside into :class:`CommandFailed`."""
    _LOGINS.last = None
    # only while a command talks to Kafka: a process that imports weft_cli (a test run)
    # keeps aiokafka's logging as it was
    propagate = _AIOKAFKA_LOG.propagate
    _AIOKAFKA_LOG.addHandler(_LOGINS)
    _AIOKAFKA_LOG.propagate = False
    try:
        yield
    except KafkaError as exc:
        raise translate(settings, principal, exc) from exc
    finally:
        _AIOKAFKA_LOG.removeHandler(_LOGINS)
        _AIOKAFKA_LOG.propagate = propagate


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
