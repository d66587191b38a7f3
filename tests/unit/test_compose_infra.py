"""docker-compose.yml's infrastructure (issue 40, item 3), offline: there is no Docker
engine where this is developed, so the file is parsed and checked, and the Kafka container's
entrypoint script is run with the container's tools replaced: its server.properties and its
SCRAM users are formatted for real by Kafka's own StorageTool (the jars the local stack
uses, deploy/local/fetch-kafka.sh), and the broker start is only recorded.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from weft_platform.kafka_acls import ACCESS, SUPER_USER

from tests.unit.test_deploy_manifests import (
    CHART,
    COMPOSE_FILE,
    _env,
    _interpolated_default,
    load_yaml,
)

INFRA_VOLUMES = {
    "kafka": "KAFKA_LOG_DIRS",
    "postgres": "/var/lib/postgresql/data",
    "redis": "/data",
}
# compose service -> the Kafka principal it logs in as (weft-<image>)
LOGINS = {
    "gateway": "weft-gateway",
    "projector": "weft-gateway",
    "agent-config": "weft-agent-config",
    "engine": "weft-engine",
    "tool-exec": "weft-tool-exec",
    "sandbox": "weft-sandbox",
    "memory": "weft-memory",
    "suggestions": "weft-suggestions",
    "knowledge": "weft-knowledge",
    "knowledge-worker": "weft-knowledge",
    "topics": SUPER_USER,
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = load_yaml(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


def _operator_principals() -> set[str]:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return set(values["kafka"]["sasl"]["operatorPrincipals"])


def scram_users(kafka: dict[str, Any]) -> dict[str, str]:
    """principal -> its default password, from WEFT_KAFKA_SCRAM_USERS."""
    raw = _interpolated_default(_env(kafka)["WEFT_KAFKA_SCRAM_USERS"])
    pairs = [item.split("=", 1) for item in raw.split()]
    users = {name: password for name, password in pairs}
    assert len(users) == len(pairs), "a principal twice"
    return users


def test_infrastructure_keeps_its_data_on_named_volumes(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    for service, target in INFRA_VOLUMES.items():
        svc = compose["services"][service]
        if target.startswith("KAFKA_"):
            target = _env(svc)[target]
        mounts = {}
        for item in svc.get("volumes") or []:
            source, _, path = str(item).partition(":")
            mounts[path.split(":")[0]] = source
        assert target in mounts, f"{service}: {target} is not on a volume ({mounts})"
        assert mounts[target] in declared, f"{service}: {mounts[target]} is not a named volume"


def test_infrastructure_images_are_pinned(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        image = svc.get("image")
        if image is None:
            continue
        tag = image.partition(":")[2]
        assert "@sha256:" in image or re.fullmatch(r"\d+\.\d+(\.\d+)?", tag), (
            f"{name}: {image} is not an exact version"
        )


def test_kafka_accepts_only_scram_logins(compose: dict[str, Any]) -> None:
    env = {k: _interpolated_default(v) for k, v in _env(compose["services"]["kafka"]).items()}
    protocols = dict(
        item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    )
    for listener in env["KAFKA_LISTENERS"].split(","):
        name, _, address = listener.partition("://")
        if protocols[name] == "PLAINTEXT":
            # only the KRaft controller, on the container's own loopback
            assert name == env["KAFKA_CONTROLLER_LISTENER_NAMES"], listener
            assert address.startswith("127.0.0.1:"), listener
        else:
            assert protocols[name] == "SASL_PLAINTEXT", listener
    assert env["KAFKA_ADVERTISED_LISTENERS"].startswith("SASL_PLAINTEXT://kafka:9092")
    assert env["KAFKA_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512"
    assert env["KAFKA_AUTHORIZER_CLASS_NAME"].endswith("StandardAuthorizer")
    assert env["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    assert f"User:{SUPER_USER}" in env["KAFKA_SUPER_USERS"].split(";")


def test_one_scram_user_per_principal(compose: dict[str, Any]) -> None:
    """The super user, every principal of the ACL table and the operator tooling's, like
    the local stack (deploy/local/infra.sh) and the chart's SASL keys."""
    users = scram_users(compose["services"]["kafka"])
    assert set(users) == set(ACCESS) | {SUPER_USER} | _operator_principals()
    assert len(set(users.values())) == len(users), "two principals share a password"


def test_each_process_logs_in_as_its_own_principal(compose: dict[str, Any]) -> None:
    users = scram_users(compose["services"]["kafka"])
    for service, principal in LOGINS.items():
        env = {k: _interpolated_default(v) for k, v in _env(compose["services"][service]).items()}
        assert env["WEFT_KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT", service
        assert env["WEFT_KAFKA_USERNAME"] == principal, service
        assert env["WEFT_KAFKA_PASSWORD"] == users[principal], service
        variable = "WEFT_KAFKA_PASSWORD_" + principal.upper().replace("-", "_")
        assert variable in _env(compose["services"][service])["WEFT_KAFKA_PASSWORD"], service


def _kafka_jars() -> Path:
    cache = Path(os.environ.get("WEFT_CACHE", Path.home() / ".cache" / "weft"))
    jars = cache / f"kafka-{os.environ.get('WEFT_KAFKA_VERSION', '4.1.1')}"
    if not (jars / ".weft-complete").exists() and not list(jars.glob("kafka_*.jar")):
        pytest.fail(f"Kafka jars missing at {jars}: run deploy/local/bootstrap.sh", pytrace=False)
    return jars


def test_the_kafka_entrypoint_formats_its_volume_with_the_scram_users(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    kafka = compose["services"]["kafka"]
    assert kafka["entrypoint"] == ["/bin/bash", "-c"]
    (script,) = kafka["command"]
    script = script.replace("$$", "$")  # compose's escape of a literal $
    bin_dir, run = tmp_path / "bin", tmp_path / "run"
    bin_dir.mkdir()
    run.mkdir()
    script = script.replace("/tmp/", f"{run}/").replace("/opt/kafka/bin/", f"{bin_dir}/")
    jars = _kafka_jars()
    storage = bin_dir / "kafka-storage.sh"
    storage.write_text(f'#!/bin/bash\nexec java -cp "{jars}/*" kafka.tools.StorageTool "$@"\n')
    start = bin_dir / "kafka-server-start.sh"
    start.write_text(f'#!/bin/bash\necho "$@" >"{run}/started"\n')
    storage.chmod(0o755)
    start.chmod(0o755)
    env = {k: _interpolated_default(v) for k, v in _env(kafka).items()}
    env["KAFKA_LOG_DIRS"] = str(tmp_path / "data")
    result = subprocess.run(
        ["/bin/bash", "-c", script],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    props = dict(
        line.split("=", 1) for line in (run / "server.properties").read_text().splitlines()
    )
    assert props["listeners"] == env["KAFKA_LISTENERS"]
    assert props["super.users"] == env["KAFKA_SUPER_USERS"]
    assert props["log.dirs"] == str(tmp_path / "data")
    assert "weft-admin" in props["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"]
    assert "heap.opts" not in props
    assert (tmp_path / "data" / "meta.properties").is_file(), "not formatted"
    assert (run / "started").read_text().strip() == str(run / "server.properties")
    client = (run / "weft-admin.properties").read_text()
    assert 'username="weft-admin"' in client and "SCRAM-SHA-512" in client
    # Formatting again keeps the volume (a restart must not wipe the log).
    again = subprocess.run(
        ["/bin/bash", "-c", script],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 0, again.stderr
