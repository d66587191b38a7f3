"""Kafka logins and the ACL table, without a broker: the settings every client is built from,
the table's policy against ARCHITECTURE's "who writes which topic", the documented table,
the services' consumer groups, and which principal each test-stack service logs in as.
(``tests/security/test_kafka_acls.py`` checks the same table against a real SASL broker.)"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from faststream.security import BaseSecurity, SASLScram512
from pydantic import ValidationError
from weft_contracts import Topic
from weft_engine.app import CONTROL_GROUP, REQUESTS_GROUP, RESULTS_GROUP
from weft_gateway.app import PROJECTOR_GROUP
from weft_gateway.notices import NOTICES_GROUP
from weft_memory.app import CONSUMER_GROUP as MEMORY_GROUP
from weft_platform.kafka_acls import (
    ACCESS,
    CONSUMER_GROUPS,
    DLQ_REPLAY,
    OPS_LAG,
    OPS_TOPICS,
    SERVICE_PRINCIPALS,
    SESSION_NOTICES,
    bindings,
    markdown_table,
)
from weft_platform.settings import KafkaAccess
from weft_platform.topics import durability_for, new_topics
from weft_sandbox.app import CONSUMER_GROUP as SANDBOX_GROUP
from weft_suggestions.app import CONSUMER_GROUP as SUGGESTIONS_GROUP
from weft_testkit import LocalStack, StackConfig
from weft_testkit.stack import SERVICES
from weft_tool_exec.app import CONSUMER_GROUP as TOOL_EXEC_GROUP

REPO = Path(__file__).resolve().parents[2]


def _writers(topic: str) -> set[str]:
    return {p for p, access in ACCESS.items() if topic in access.writes}


def _readers(topic: str) -> set[str]:
    return {p for p, access in ACCESS.items() if topic in access.reads}


def test_the_table_follows_who_writes_which_topic() -> None:
    """ARCHITECTURE, "Topics" (the replay identity puts dead letters back on their topic)."""
    assert _writers(Topic.AGENT_EVENTS) == {"weft-engine"}, "only the engine writes events"
    assert _writers(Topic.AGENT_REQUESTS) == {"weft-gateway", DLQ_REPLAY}
    # memory: approval expiries (ARCHITECTURE, "Topics").
    assert _writers(Topic.AGENT_CONTROL) == {"weft-gateway", "weft-memory", DLQ_REPLAY}
    assert _writers(Topic.TOOL_CALLS) == {"weft-engine", DLQ_REPLAY}
    assert _writers(Topic.SANDBOX_CALLS) == {"weft-engine", DLQ_REPLAY}
    assert _writers(Topic.TOOL_RESULTS) == {"weft-tool-exec", "weft-sandbox", DLQ_REPLAY}
    # knowledge: ingestion progress notices (tool-exec ingested before knowledge did).
    assert _writers(SESSION_NOTICES) == {
        "weft-suggestions",
        "weft-knowledge",
        "weft-engine",
        "weft-memory",
    }
    assert _readers(SESSION_NOTICES) == {"weft-gateway"}
    assert _readers(Topic.AGENT_REQUESTS) == {"weft-engine"}
    assert _readers(Topic.TOOL_CALLS) == {"weft-tool-exec"}
    assert _readers(Topic.SANDBOX_CALLS) == {"weft-sandbox"}


def test_every_service_may_dead_letter_and_only_the_replay_identity_reads_dead_letters() -> None:
    assert _writers(Topic.DLQ) == set(SERVICE_PRINCIPALS.values())
    assert _readers(Topic.DLQ) == {DLQ_REPLAY}
    assert DLQ_REPLAY not in SERVICE_PRINCIPALS.values()


def test_the_groups_are_the_services_own() -> None:
    """A renamed consumer group without its ACL would be refused at start."""
    groups = {
        "weft-gateway": {PROJECTOR_GROUP, NOTICES_GROUP},
        "weft-engine": {REQUESTS_GROUP, RESULTS_GROUP, CONTROL_GROUP},
        "weft-tool-exec": {TOOL_EXEC_GROUP},
        "weft-sandbox": {SANDBOX_GROUP},
        "weft-memory": {MEMORY_GROUP},
        "weft-suggestions": {SUGGESTIONS_GROUP},
    }
    for principal, expected in groups.items():
        assert ACCESS[principal].groups == expected, principal
    assert set(SERVICE_PRINCIPALS) == set(SERVICES), "every stack service has a principal"


def test_the_operators_tools_read_and_write_no_record() -> None:
    """weft lag describes, weft topics creates and alters: neither reads a record, writes
    one or joins a group (docs/cli.md)."""
    for principal in (OPS_LAG, OPS_TOPICS):
        access = ACCESS[principal]
        assert not (access.reads or access.writes or access.groups), principal
    assert ACCESS[OPS_LAG].describe_groups == CONSUMER_GROUPS
    assert not (ACCESS[OPS_LAG].creates or ACCESS[OPS_LAG].alters)
    assert ACCESS[OPS_TOPICS].alters == ACCESS[OPS_TOPICS].creates == {t.value for t in Topic}
    assert not ACCESS[OPS_TOPICS].describe_groups
    assert {OPS_LAG, OPS_TOPICS}.isdisjoint(SERVICE_PRINCIPALS.values())


def test_lag_covers_every_consumer_group_of_the_table() -> None:
    assert set().union(*(a.groups for a in ACCESS.values())) == CONSUMER_GROUPS


def test_acls_name_the_prefixed_topics_and_groups() -> None:
    mine = bindings("t1.")
    assert mine and all(b.name.startswith("t1.weft") for b in mine)
    assert len(mine) == len(bindings()), "one rule per table entry"


def test_the_documented_table_is_the_code_table() -> None:
    doc = (REPO / "docs" / "security.md").read_text()
    start = doc.index("<!-- kafka-acl-table:start -->\n") + len("<!-- kafka-acl-table:start -->\n")
    end = doc.index("\n<!-- kafka-acl-table:end -->")
    assert doc[start:end] == markdown_table(), "regenerate: kafka_acls.markdown_table()"


def test_sasl_without_a_password_is_a_settings_error() -> None:
    with pytest.raises(ValidationError, match="WEFT_KAFKA_PASSWORD"):
        KafkaAccess(kafka_security_protocol="SASL_PLAINTEXT", kafka_username="weft-engine")


def test_client_options_carry_the_login_and_tls() -> None:
    plain = KafkaAccess(kafka_bootstrap="b:9092", kafka_security_protocol="PLAINTEXT")
    assert plain.client_options() == {
        "bootstrap_servers": "b:9092",
        "security_protocol": "PLAINTEXT",
    }
    assert plain.faststream_security() is None
    sasl = KafkaAccess(
        kafka_bootstrap="b:9093", kafka_security_protocol="SASL_SSL",
        kafka_username="weft-memory", kafka_password="pw",
    )  # fmt: skip
    options = sasl.client_options()
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("weft-memory", "pw")
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    security = sasl.faststream_security()
    assert isinstance(security, SASLScram512) and security.use_ssl
    assert "pw" not in repr(sasl), "the password is a secret in logs and reprs"
    tls = KafkaAccess(kafka_security_protocol="SSL").faststream_security()
    assert isinstance(tls, BaseSecurity) and tls.use_ssl and tls.ssl_context is not None


def test_topics_get_the_configured_durability() -> None:
    env = {"WEFT_TOPIC_REPLICATION_FACTOR": "3", "WEFT_TOPIC_MIN_INSYNC_REPLICAS": "2"}
    (topic,) = new_topics([Topic.AGENT_EVENTS], env, prefix="p.")
    assert (topic.name, topic.replication_factor) == ("p.weft.agent.events.v1", 3)
    assert topic.topic_configs == {"min.insync.replicas": "2"}
    assert durability_for({}) == (1, 1), "the local broker's default"
    with pytest.raises(ValueError, match="MIN_INSYNC"):
        durability_for(
            {"WEFT_TOPIC_REPLICATION_FACTOR": "1", "WEFT_TOPIC_MIN_INSYNC_REPLICAS": "2"}
        )


def test_each_stack_service_logs_in_as_its_own_principal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "kafka-client.env").write_text(
        "WEFT_KAFKA_BOOTSTRAP=127.0.0.1:39092\nWEFT_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT\n"
        "WEFT_KAFKA_USERNAME=weft-admin\nWEFT_KAFKA_PASSWORD=admin-pw\n"
    )
    principals = ["weft-admin", *ACCESS]
    (data / "kafka-users").write_text("".join(f"{p} pw-{p}\n" for p in principals))
    monkeypatch.setenv("WEFT_HOME", str(tmp_path))
    monkeypatch.setenv("WEFT_KAFKA_BOOTSTRAP", "127.0.0.1:39092")
    for key in ("WEFT_KAFKA_SECURITY_PROTOCOL", "WEFT_KAFKA_USERS_FILE"):
        monkeypatch.delenv(key, raising=False)
    stack = LocalStack(StackConfig(log_dir=tmp_path))
    stack.ports = {name: [1] for name in ("scripted_llm", *SERVICES)}
    for name in SERVICES:
        env = stack.service_env(name, 1)
        principal = SERVICE_PRINCIPALS[name]
        assert env["WEFT_KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
        assert (env["WEFT_KAFKA_USERNAME"], env["WEFT_KAFKA_PASSWORD"]) == (
            principal,
            f"pw-{principal}",
        )
    assert "WEFT_KAFKA_PASSWORD" not in stack.service_env("scripted_llm", 1)
    # Another broker than the one infra.sh wrote these for: no login is taken from them.
    monkeypatch.setenv("WEFT_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
    assert "WEFT_KAFKA_SECURITY_PROTOCOL" not in stack.service_env("memory", 1)
