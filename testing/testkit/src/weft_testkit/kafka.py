"""Who tests and test stacks are to the local Kafka broker.

``deploy/local/infra.sh`` formats its broker with SCRAM users (by default) and writes, next
to the data dir, the super user's client settings (``kafka-client.env``) and every user's
password (``kafka-users``). Tests' own clients connect as the super user; each service of a
:class:`~weft_testkit.LocalStack` connects as its own principal, so the broker's ACLs are in
force in every end-to-end test.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[4]

CLIENT_KEYS = (
    "WEFT_KAFKA_SECURITY_PROTOCOL",
    "WEFT_KAFKA_SASL_MECHANISM",
    "WEFT_KAFKA_USERNAME",
    "WEFT_KAFKA_PASSWORD",
    "WEFT_KAFKA_SSL_CAFILE",
    "WEFT_KAFKA_SSL_CERTFILE",
    "WEFT_KAFKA_SSL_KEYFILE",
)
"""The client settings of ``weft_platform.settings.KafkaAccess`` besides the bootstrap."""


def _data_dir() -> Path:
    return Path(os.environ.get("WEFT_HOME") or REPO / ".weft") / "data"


def _read_env_file(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def kafka_client_env(bootstrap: str) -> dict[str, str]:
    """The super user's ``WEFT_KAFKA_*`` client settings for the broker at ``bootstrap``.

    Settings in the environment win (``WEFT_KAFKA_SECURITY_PROTOCOL`` set: all of them are
    taken from there); otherwise those infra.sh wrote for its broker under ``WEFT_HOME``,
    when that broker is the one at ``bootstrap``; otherwise none (a plaintext broker).
    """
    if os.environ.get("WEFT_KAFKA_SECURITY_PROTOCOL"):
        return {key: os.environ[key] for key in CLIENT_KEYS if key in os.environ}
    written = _read_env_file(_data_dir() / "kafka-client.env")
    if written.get("WEFT_KAFKA_BOOTSTRAP") != bootstrap:
        return {}
    return {key: value for key, value in written.items() if key in CLIENT_KEYS}


def kafka_users() -> dict[str, str]:
    """Every SCRAM user of the local broker and its password (``WEFT_KAFKA_USERS_FILE``, or
    the one infra.sh wrote under ``WEFT_HOME``); empty for a plaintext broker."""
    path = Path(os.environ.get("WEFT_KAFKA_USERS_FILE") or _data_dir() / "kafka-users")
    if not path.is_file():
        return {}
    rows = (line.split() for line in path.read_text().splitlines())
    return {row[0]: row[1] for row in rows if len(row) == 2}


def principal_env(env: dict[str, str], principal: str | None) -> dict[str, str]:
    """``env`` with the Kafka login of ``principal`` instead of its own (unchanged when the
    broker takes no logins; without a login for a process that is no Weft service)."""
    if not env.get("WEFT_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT").startswith("SASL_"):
        return env
    if principal is None:
        return {
            k: v for k, v in env.items() if k not in ("WEFT_KAFKA_USERNAME", "WEFT_KAFKA_PASSWORD")
        }
    users = kafka_users()
    if principal not in users:
        raise RuntimeError(f"no SCRAM user {principal!r} for the local broker (infra.sh up)")
    return {**env, "WEFT_KAFKA_USERNAME": principal, "WEFT_KAFKA_PASSWORD": users[principal]}


def client_options(env: dict[str, str]) -> dict[str, Any]:
    """Keyword arguments of an aiokafka client from ``WEFT_KAFKA_*`` settings (no TLS: the
    local broker listens on loopback)."""
    protocol = env.get("WEFT_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT")
    options: dict[str, Any] = {
        "bootstrap_servers": env["WEFT_KAFKA_BOOTSTRAP"],
        "security_protocol": protocol,
    }
    if protocol.startswith("SASL_"):
        options["sasl_mechanism"] = env.get("WEFT_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
        options["sasl_plain_username"] = env["WEFT_KAFKA_USERNAME"]
        options["sasl_plain_password"] = env["WEFT_KAFKA_PASSWORD"]
    return options


def settings_fields(env: dict[str, str]) -> dict[str, str]:
    """The ``WEFT_KAFKA_*`` entries of ``env`` as keyword arguments of the services'
    settings (``KafkaAccess``, ``ServiceSettings``): ``WEFT_KAFKA_X`` -> ``kafka_x``."""
    keys = ("WEFT_KAFKA_BOOTSTRAP", *CLIENT_KEYS)
    return {key.removeprefix("WEFT_").lower(): env[key] for key in keys if key in env}
