"""Where ``weft`` finds the gateway, its credentials and the Kafka broker: environment
variables (the names the local stack uses, deploy/local/env.sh), each API one overridable
by a flag. Kafka passwords come from the environment only: a flag would show in ``ps``."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from weft_platform.settings import KafkaAccess

from weft_cli.outcome import CommandFailed, ExitCode


class ApiSettings(BaseSettings):
    """``WEFT_API_URL``, ``WEFT_API_KEY`` (a tenant's key, for chat and knowledge bases)
    and ``WEFT_ADMIN_TOKEN`` (the operator token of ``/admin/v1``)."""

    model_config = SettingsConfigDict(env_prefix="WEFT_", extra="ignore")

    api_url: str = "http://127.0.0.1:8080"
    api_key: SecretStr = SecretStr("")
    admin_token: SecretStr = SecretStr("")
    timeout_s: float = Field(default=60.0, gt=0)


class KafkaSettings(KafkaAccess):
    """:class:`~weft_platform.settings.KafkaAccess` (``WEFT_KAFKA_*``) and the deployment's
    ``WEFT_TOPIC_PREFIX``."""

    topic_prefix: str = ""


def kafka_settings(bootstrap: str | None, prefix: str | None) -> KafkaSettings:
    """The Kafka settings of the environment, with the flags that override them; a setting
    error (SASL without a password) is a usage error, not a traceback."""
    overrides: dict[str, str] = {}
    if bootstrap:
        overrides["kafka_bootstrap"] = bootstrap
    if prefix is not None:
        overrides["topic_prefix"] = prefix
    try:
        return KafkaSettings(**overrides)  # type: ignore[arg-type]
    except ValueError as exc:
        raise CommandFailed(f"Kafka settings: {_first_error(exc)}", ExitCode.USAGE) from exc


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        found = errors()
        if found:
            return str(found[0].get("msg", exc))
    return str(exc)
