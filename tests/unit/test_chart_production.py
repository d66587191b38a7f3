"""The chart as an operations team installs it (issue 40, item 2), offline.

Rendered with `helm template` for several value sets, each once per module (defaults with
only the required values, i.e. ci/test-double-values.yaml; ci/production-values.yaml; and
every optional object on: ci/everything-values.yaml), every object is validated: built-in
kinds against the Kubernetes OpenAPI schemas (kubernetes-validate, strict), the CRD kinds
(KEDA, Gateway API, prometheus-operator) against their vendored schemas
(tests/schemas/crds, VERSIONS.json says which release; refresh.py fetches them from the
projects' Go modules). What a cluster would do with them (PDBs during a drain, HPA and KEDA
scaling, rollouts) is not exercised here: there is no cluster.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import inspect
import json
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from weft_contracts import Topic
from weft_engine.settings import EngineSettings
from weft_platform import app as platform_app
from weft_platform.kafka_acls import ACCESS, SUPER_USER
from weft_platform.topics import retention_for

from tests.unit.test_deploy_manifests import (
    CHART,
    HELM_INSTALL_HINT,
    KUBE_VERSION,
    SCHEMA_VERSIONS,
    _find_helm,
    load_yaml_docs,
)

Doc = dict[str, Any]

CRDS = Path(__file__).resolve().parents[1] / "schemas" / "crds"
CI = CHART / "ci"
VALUE_SETS: dict[str, tuple[str, ...]] = {
    "defaults": ("test-double-values.yaml",),
    "production": ("production-values.yaml",),
    "everything": ("test-double-values.yaml", "everything-values.yaml"),
}
ADMIN_PREFIX = "/admin/v1"  # weft_gateway.admin_api's router prefix
COMPONENT = "app.kubernetes.io/component"
# Deployments whose drain is no outage: the ingestion queue waits (and claimed documents
# are reclaimed); the LLM test double is no production component.
SINGLE_REPLICA_OK = {"knowledge-worker", "scripted-llm"}


def _helm_args(
    files: tuple[str, ...], sets: tuple[str, ...] = (), release: str = "weft"
) -> list[str]:
    helm = _find_helm()
    if helm is None:
        pytest.fail(HELM_INSTALL_HINT, pytrace=False)
    args = [helm, "template", release, str(CHART), "--kube-version", KUBE_VERSION]
    for name in files:
        args += ["-f", str(CI / name)]
    for item in sets:
        flag = "--set-json" if item.startswith("json:") else "--set"
        args += [flag, item.removeprefix("json:")]
    return args


def template(
    files: tuple[str, ...], *sets: str, release: str = "weft"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _helm_args(files, sets, release), capture_output=True, text=True, timeout=60, check=False
    )


def render(files: tuple[str, ...], *sets: str, release: str = "weft") -> list[Doc]:
    result = template(files, *sets, release=release)
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return load_yaml_docs(result.stdout)


@pytest.fixture(scope="module")
def renders() -> dict[str, list[Doc]]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = {name: pool.submit(render, files) for name, files in VALUE_SETS.items()}
        return {name: future.result() for name, future in done.items()}


def by_kind(docs: list[Doc], kind: str) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def components(docs: list[Doc], kind: str) -> dict[str, Doc]:
    return {d["metadata"]["labels"][COMPONENT]: d for d in docs if d["kind"] == kind}


# --------------------------------------------------------------------------- schemas


def _closed(schema: Any) -> Any:
    """A CRD schema as the API server applies it to a typo: structural schemas prune
    unknown fields (and `kubectl --validate=strict` refuses them), so an object with
    properties and neither additionalProperties nor x-kubernetes-preserve-unknown-fields
    accepts no other key here."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def _crd_validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    versions = json.loads((CRDS / "VERSIONS.json").read_text())
    out = {}
    for filename, meta in versions.items():
        schema = _closed(json.loads((CRDS / filename).read_text()))
        # metadata is the API server's ObjectMeta, not the CRD's to describe
        schema["properties"]["metadata"] = {"type": "object"}
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
        out[(meta["apiVersion"], meta["kind"])] = cls(schema)
    return out


CRD_VALIDATORS = _crd_validators()


def schema_errors(docs: list[Doc]) -> list[str]:
    errors = []
    for doc in docs:
        what = f"{doc['kind']}/{doc['metadata']['name']}"
        validator = CRD_VALIDATORS.get((doc["apiVersion"], doc["kind"]))
        if validator is not None:
            for error in validator.iter_errors(doc):
                errors.append(f"{what} at {'.'.join(map(str, error.path))}: {error.message}")
            continue
        for version in SCHEMA_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                errors.append(f"{what} (Kubernetes {version}) at {exc.path}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError:
                errors.append(f"{what}: no schema for {doc['apiVersion']} (vendor its CRD)")
    return errors


def test_every_object_of_every_value_set_matches_its_schema(
    renders: dict[str, list[Doc]],
) -> None:
    kinds: set[str] = set()
    for name, docs in renders.items():
        assert docs, name
        errors = schema_errors(docs)
        assert not errors, f"{name}:\n" + "\n".join(errors)
        kinds |= {d["kind"] for d in docs}
    # every CRD kind the chart can render was checked against its vendored schema
    assert {kind for _, kind in CRD_VALIDATORS} <= kinds


def test_the_crd_check_refuses_a_typo_and_a_wrong_type(renders: dict[str, list[Doc]]) -> None:
    """The vendored schemas are live: a misspelt field or a string count fails."""
    docs = renders["everything"]
    scaled = next(d for d in docs if d["kind"] == "ScaledObject")
    typo = copy.deepcopy(scaled)
    typo["spec"]["maxReplicaCountt"] = typo["spec"].pop("maxReplicaCount")
    wrong = copy.deepcopy(scaled)
    wrong["spec"]["minReplicaCount"] = "two"
    route = copy.deepcopy(next(d for d in docs if d["kind"] == "HTTPRoute"))
    route["spec"]["rules"][0]["backendRefs"][0]["port"] = "http"
    monitor = copy.deepcopy(next(d for d in docs if d["kind"] == "ServiceMonitor"))
    monitor["spec"]["endpoint"] = monitor["spec"].pop("endpoints")
    for broken in (typo, wrong, route, monitor):
        assert schema_errors([broken]), broken["kind"]


def test_the_crd_schemas_are_the_vendored_releases() -> None:
    versions = json.loads((CRDS / "VERSIONS.json").read_text())
    assert {m["module"] for m in versions.values()} == {
        "github.com/kedacore/keda/v2",
        "sigs.k8s.io/gateway-api",
        "github.com/prometheus-operator/prometheus-operator",
    }
    for filename, meta in versions.items():
        assert (CRDS / filename).is_file(), filename
        assert meta["version"].startswith("v"), meta


# --------------------------------------------------------------------------- values schema


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("networkPolicy.enable=false", "'enable' not allowed"),  # the key is `enabled`
        ("services.engine.replicas=abc", "want integer"),
        ("defaults.replicsa=3", "'replicsa' not allowed"),
        ("ingres.enabled=true", "'ingres' not allowed"),
        ("services.gateway.adminPort=admin", "integer"),
        ("autoscaling.engine.mechanism=both", "autoscaling/engine/mechanism"),
        ("kafka.retentionMs.topics.TOOL_CALL=1000", "TOOL_CALL"),
        ("kafka.securityProtocol=SASL", "securityProtocol"),
        ("services.memory.pdb.maxUnavailable=0", "maxUnavailable"),
    ],
)
def test_the_values_schema_refuses_typos_and_wrong_types(setting: str, complaint: str) -> None:
    result = template(VALUE_SETS["defaults"], setting)
    assert result.returncode != 0, f"{setting} rendered"
    assert "schema" in result.stderr and complaint in result.stderr, result.stderr


def test_the_schema_knows_the_topics_and_every_default() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    topics = schema["properties"]["kafka"]["properties"]["retentionMs"]["properties"]["topics"]
    assert set(topics["propertyNames"]["enum"]) == {t.name for t in Topic}
    # helm validates the defaults against the schema too: values.yaml alone must pass it
    result = template(VALUE_SETS["defaults"])
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------- names


def _release_names() -> list[str]:
    names = []
    for length in range(40, 54):
        names.append(("r" + "x" * 60)[:length])  # without "weft"
        names.append(("weft-" + "y" * 60)[:length])  # with it (the base is the release)
    return names


def test_names_are_unique_for_every_long_release_name() -> None:
    """Release names of 40 to 53 characters, with and without "weft": one name per object
    of a kind, at most 63 characters, and each release's own (two releases whose names
    share their first 32 characters do not collide either)."""
    releases = _release_names()
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(
            pool.map(lambda r: (r, render(VALUE_SETS["everything"], release=r)), releases)
        )
    seen: dict[tuple[str, str], str] = {}
    for release, docs in results:
        names = Counter((d["kind"], d["metadata"]["name"]) for d in docs)
        duplicates = [key for key, count in names.items() if count > 1]
        assert not duplicates, f"{release} ({len(release)}): {duplicates}"
        for kind, name in names:
            assert len(name) <= 63, f"{release}: {kind}/{name} is {len(name)} characters"
            if kind in ("ClusterRole", "ValidatingAdmissionPolicy", "Namespace"):
                continue  # sandbox namespace objects: namespaced by name, checked above
            other = seen.setdefault((kind, name), release)
            assert other == release, f"{kind}/{name} is both {other}'s and {release}'s"
        deployments = components(docs, "Deployment")
        assert (
            deployments["gateway"]["metadata"]["name"]
            != (deployments["gateway-projector"]["metadata"]["name"])
        )


# --------------------------------------------------------------------------- availability


def _scale_targets(docs: list[Doc]) -> Counter[str]:
    targets: Counter[str] = Counter()
    for doc in docs:
        if doc["kind"] in ("HorizontalPodAutoscaler", "ScaledObject"):
            ref = doc["spec"]["scaleTargetRef"]
            assert ref.get("kind", "Deployment") == "Deployment"
            targets[ref["name"]] += 1
    return targets


def assert_one_autoscaler_each(docs: list[Doc]) -> None:
    targets = _scale_targets(docs)
    deployments = by_kind(docs, "Deployment")
    twice = [name for name, count in targets.items() if count > 1]
    assert not twice, f"an HPA and a ScaledObject (or two) on {twice}"
    assert set(targets) <= set(deployments), targets
    for name, deployment in deployments.items():
        owned = name in targets
        assert ("replicas" in deployment["spec"]) != owned, (
            f"{name}: replicas must be the autoscaler's alone (owned={owned})"
        )


def test_one_autoscaler_per_workload(renders: dict[str, list[Doc]]) -> None:
    for docs in renders.values():
        assert_one_autoscaler_each(docs)
    docs = renders["everything"]
    hpas = {
        d["spec"]["scaleTargetRef"]["name"]
        for d in by_kind(docs, "HorizontalPodAutoscaler").values()
    }
    scaled = {d["spec"]["scaleTargetRef"]["name"] for d in by_kind(docs, "ScaledObject").values()}
    assert hpas == {"weft-gateway", "weft-engine"}
    assert scaled == {"weft-tool-exec", "weft-sandbox", "weft-knowledge-worker"}
    for hpa in by_kind(docs, "HorizontalPodAutoscaler").values():
        (metric,) = hpa["spec"]["metrics"]
        assert metric["resource"]["name"] == "cpu"
        assert hpa["spec"]["minReplicas"] >= 2


def test_the_engine_scales_on_its_lag_or_its_cpu_never_both() -> None:
    from weft_engine.app import REQUESTS_GROUP

    files = VALUE_SETS["everything"]
    keda = render(files, "autoscaling.engine.mechanism=keda")
    assert_one_autoscaler_each(keda)
    engine = by_kind(keda, "ScaledObject")["weft-engine"]
    (trigger,) = engine["spec"]["triggers"]
    assert trigger["metadata"]["consumerGroup"] == REQUESTS_GROUP
    assert trigger["metadata"]["topic"] == Topic.AGENT_REQUESTS.value
    assert "weft-engine" not in by_kind(keda, "HorizontalPodAutoscaler")
    none = render(files, "autoscaling.engine.mechanism=none")
    assert_one_autoscaler_each(none)
    assert "weft-engine" not in _scale_targets(none)


def test_sandbox_and_tool_exec_scale_on_their_own_lag(renders: dict[str, list[Doc]]) -> None:
    from weft_sandbox.app import CONSUMER_GROUP as SANDBOX_GROUP
    from weft_tool_exec.app import CONSUMER_GROUP as TOOL_EXEC_GROUP

    scaled = by_kind(renders["everything"], "ScaledObject")
    for name, group, topic in (
        ("weft-sandbox", SANDBOX_GROUP, Topic.SANDBOX_CALLS),
        ("weft-tool-exec", TOOL_EXEC_GROUP, Topic.TOOL_CALLS),
    ):
        (trigger,) = scaled[name]["spec"]["triggers"]
        assert trigger["type"] == "kafka"
        assert (trigger["metadata"]["consumerGroup"], trigger["metadata"]["topic"]) == (
            group,
            topic.value,
        )
    (ingestion,) = scaled["weft-knowledge-worker"]["spec"]["triggers"]
    assert ingestion["type"] == "prometheus"
    assert "weft_ingestion_queue_depth" in ingestion["metadata"]["query"]


def test_every_deployment_has_a_pdb_that_never_blocks_a_drain(
    renders: dict[str, list[Doc]],
) -> None:
    for label, docs in renders.items():
        pdbs = components(docs, "PodDisruptionBudget")
        for component, deployment in components(docs, "Deployment").items():
            pdb = pdbs.get(component)
            assert pdb, f"{label}: {component} has no PodDisruptionBudget"
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            selector = pdb["spec"]["selector"]["matchLabels"]
            assert selector.items() <= labels.items(), component
            assert "minAvailable" not in pdb["spec"], component
            assert pdb["spec"]["maxUnavailable"] >= 1, component


def test_replicas_survive_a_drain(renders: dict[str, list[Doc]]) -> None:
    """At least two pods of everything a request waits on (memory included), by default
    and under an autoscaler's minimum."""
    for label, docs in renders.items():
        minimum = {
            d["spec"]["scaleTargetRef"]["name"]: d["spec"].get(
                "minReplicas", d["spec"].get("minReplicaCount")
            )
            for d in docs
            if d["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")
        }
        for component, deployment in components(docs, "Deployment").items():
            if component in SINGLE_REPLICA_OK:
                continue
            name = deployment["metadata"]["name"]
            replicas = minimum.get(name, deployment["spec"].get("replicas"))
            assert replicas is not None and replicas >= 2, f"{label}: {component} has {replicas}"


def test_replicas_spread_over_zones_and_nodes(renders: dict[str, list[Doc]]) -> None:
    for component, deployment in components(renders["defaults"], "Deployment").items():
        pod = deployment["spec"]["template"]
        constraints = pod["spec"]["topologySpreadConstraints"]
        keys = {c["topologyKey"] for c in constraints}
        assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}, component
        for constraint in constraints:
            selector = constraint["labelSelector"]["matchLabels"]
            assert selector.items() <= pod["metadata"]["labels"].items(), component
            assert selector[COMPONENT] == component


def _uvicorn_drain_s() -> int:
    """uvicorn's timeout_graceful_shutdown in weft_platform.app.run_service."""
    tree = ast.parse(inspect.getsource(platform_app.run_service))
    (value,) = [
        kw.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for kw in node.keywords
        if kw.arg == "timeout_graceful_shutdown"
    ]
    assert isinstance(value, ast.Constant) and isinstance(value.value, int), ast.dump(value)
    return value.value


def test_shutdown_fits_each_services_drain(renders: dict[str, list[Doc]]) -> None:
    drain = _uvicorn_drain_s()
    engine_steps = EngineSettings.model_fields["shutdown_grace_s"].default
    for component, deployment in components(renders["defaults"], "Deployment").items():
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert pre_stop >= 1, component
        needed = pre_stop + drain + (engine_steps if component == "engine" else 0)
        assert spec["terminationGracePeriodSeconds"] >= needed, (
            f"{component}: {spec['terminationGracePeriodSeconds']} s < {needed} s"
        )
    short = template(VALUE_SETS["defaults"], "services.memory.terminationGracePeriodSeconds=10")
    assert short.returncode != 0 and "terminationGracePeriodSeconds" in short.stderr


def test_readiness_grace_and_probes_agree(renders: dict[str, list[Doc]]) -> None:
    docs = renders["defaults"]
    (common,) = [c for n, c in by_kind(docs, "ConfigMap").items() if n.endswith("-common")]
    grace = int(common["data"]["WEFT_READINESS_GRACE_S"])
    assert grace == 30
    for component, deployment in components(docs, "Deployment").items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        ready, live = container["readinessProbe"], container["livenessProbe"]
        assert ready["httpGet"]["path"] == "/readyz" and live["httpGet"]["path"] == "/healthz"
        assert ready["periodSeconds"] * ready["failureThreshold"] <= grace, component
        assert ready["timeoutSeconds"] < ready["periodSeconds"], component
    changed = render(VALUE_SETS["defaults"], "readiness.graceSeconds=60")
    (common,) = [c for n, c in by_kind(changed, "ConfigMap").items() if n.endswith("-common")]
    assert common["data"]["WEFT_READINESS_GRACE_S"] == "60"
    double = template(VALUE_SETS["defaults"], "readiness.graceSeconds=10")
    assert double.returncode != 0 and "failure window" in double.stderr


# --------------------------------------------------------------------------- secrets


def _env(deployment: Doc) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e for e in container.get("env", [])}


def test_no_credential_in_a_configmap(renders: dict[str, list[Doc]]) -> None:
    password = "s3cr3t-redis-pw"
    docs = render(VALUE_SETS["defaults"], f"redis.url=redis://:{password}@redis.infra:6379/0")
    for configmap in by_kind(docs, "ConfigMap").values():
        assert password not in yaml.safe_dump(configmap), configmap["metadata"]["name"]
        assert "WEFT_REDIS_URL" not in (configmap.get("data") or {})
    redis = by_kind(docs, "Secret")["weft-redis"]
    assert password in redis["stringData"]["WEFT_REDIS_URL"]
    for label, rendered in renders.items():
        for component, deployment in components(rendered, "Deployment").items():
            if component == "scripted-llm":
                continue
            ref = _env(deployment)["WEFT_REDIS_URL"]["valueFrom"]["secretKeyRef"]
            expected = ("weft-redis", "WEFT_REDIS_URL")
            if label == "production":
                expected = ("weft-redis", "WEFT_REDIS_URL")  # redis.existingSecret: weft-redis
            assert (ref["name"], ref["key"]) == expected, f"{label}: {component}"
    production = renders["production"]
    assert not by_kind(production, "Secret"), "production: every Secret is the operator's"


def test_the_kafka_super_user_has_a_secret_of_its_own(renders: dict[str, list[Doc]]) -> None:
    docs = renders["production"]
    (topics,) = [
        j for j in by_kind(docs, "Job").values() if j["metadata"]["labels"][COMPONENT] == "topics"
    ]
    ref = _env(topics)["WEFT_KAFKA_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"]) == ("weft-kafka-admin", SUPER_USER)
    for component, deployment in components(docs, "Deployment").items():
        text = yaml.safe_dump(deployment)
        assert "weft-kafka-admin" not in text, component
        login = _env(deployment).get("WEFT_KAFKA_PASSWORD")
        if login:
            assert login["valueFrom"]["secretKeyRef"]["name"] == "weft-kafka-users"
            assert login["valueFrom"]["secretKeyRef"]["key"] != SUPER_USER
    missing = template(VALUE_SETS["production"], "kafka.sasl.admin.existingSecret=")
    assert (
        missing.returncode != 0 and "kafka.sasl.admin.existingSecret is required" in missing.stderr
    )


def test_the_chart_names_a_sasl_key_for_every_principal(renders: dict[str, list[Doc]]) -> None:
    """Every principal of the ACL table (weft_platform.kafka_acls.ACCESS: the services, the
    DLQ replay and the operator tooling's) and the super user has its key: the services'
    logins, kafka.sasl.operatorPrincipals (documented keys of kafka.sasl.existingSecret)
    and kafka.sasl.admin.key."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    sasl = values["kafka"]["sasl"]
    logins = {
        e["value"]
        for d in by_kind(renders["production"], "Deployment").values()
        for e in d["spec"]["template"]["spec"]["containers"][0]["env"]
        if e["name"] == "WEFT_KAFKA_USERNAME"
    }
    keys = logins | set(sasl["operatorPrincipals"]) | {sasl["admin"]["key"]}
    missing = (set(ACCESS) | {SUPER_USER}) - keys
    assert not missing, f"principals with no key in the chart: {sorted(missing)}"
    # the operator principals the tooling needs, whether or not the table has them yet
    assert {"weft-dlq-replay", "weft-ops-lag", "weft-ops-topics"} <= set(sasl["operatorPrincipals"])
    assert not set(sasl["operatorPrincipals"]) & logins, "an operator principal in a pod"


def _checksum(docs: list[Doc], component: str) -> str:
    deployment = components(docs, "Deployment")[component]
    return str(deployment["spec"]["template"]["metadata"]["annotations"]["checksum/secret"])


def test_pods_roll_when_a_secret_changes(renders: dict[str, list[Doc]]) -> None:
    base = renders["defaults"]
    changed = render(VALUE_SETS["defaults"], "redis.url=redis://:new@redis.infra:6379/0")
    for component in ("gateway", "engine", "memory"):
        assert _checksum(base, component) != _checksum(changed, component), component
    # Secrets the chart does not make: Reloader's annotation lists each pod's own
    docs = render(VALUE_SETS["production"], "reloader.enabled=true")
    for component, deployment in components(docs, "Deployment").items():
        listed = set(
            deployment["metadata"]["annotations"]["secret.reloader.stakater.com/reload"].split(",")
        )
        env = yaml.safe_dump(deployment["spec"]["template"])
        assert {"weft-credentials", "weft-redis", "weft-kafka-users", "weft-kafka-tls"} <= listed
        for name in listed:
            assert name in env, f"{component}: lists {name}, which it does not use"
    assert all(
        "annotations" not in d["metadata"]
        for d in by_kind(renders["production"], "Deployment").values()
    ), "Reloader's annotation without reloader.enabled"


# --------------------------------------------------------------------------- ingress


def test_public_and_admin_routes(renders: dict[str, list[Doc]]) -> None:
    docs = renders["everything"]
    gateway = components(docs, "Deployment")["gateway"]
    (container,) = gateway["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert _env(gateway)["WEFT_ADMIN_PORT"]["value"] == str(ports["admin"]) == "8070"
    service = by_kind(docs, "Service")["weft-gateway"]
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}["admin"] == "admin"

    ingresses = by_kind(docs, "Ingress")
    public, admin = ingresses["weft-gateway"], ingresses["weft-gateway-admin"]
    (rule,) = public["spec"]["rules"]
    assert rule["host"] == "weft.example.com"
    assert rule["http"]["paths"][0]["backend"]["service"]["port"]["name"] == "http"
    (rule,) = admin["spec"]["rules"]
    assert rule["host"] == "weft-admin.internal.example.com"
    assert admin["spec"]["ingressClassName"] == "nginx-internal"
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["backend"]["service"]["port"]["name"]) == (ADMIN_PREFIX, "admin")

    routes = by_kind(docs, "HTTPRoute")
    public, admin = routes["weft-gateway"], routes["weft-gateway-admin"]
    assert public["spec"]["rules"][0]["backendRefs"][0]["port"] == 8080
    assert admin["spec"]["rules"][0]["backendRefs"][0]["port"] == 8070
    assert admin["spec"]["rules"][0]["matches"][0]["path"]["value"] == ADMIN_PREFIX
    assert admin["spec"]["parentRefs"][0]["name"] == "internal"
    assert public["spec"]["parentRefs"][0]["name"] == "public"

    no_admin_route = render(
        VALUE_SETS["everything"], "ingress.admin.enabled=false", "httpRoute.admin.enabled=false"
    )
    assert set(by_kind(no_admin_route, "Ingress")) == {"weft-gateway"}
    assert set(by_kind(no_admin_route, "HTTPRoute")) == {"weft-gateway"}
    for label in ("defaults", "production"):
        rendered = renders[label]
        assert not by_kind(rendered, "Ingress") and not by_kind(rendered, "HTTPRoute"), label
        gateway = components(rendered, "Deployment")["gateway"]
        assert "WEFT_ADMIN_PORT" not in _env(gateway), label
    same = template(VALUE_SETS["defaults"], "services.gateway.adminPort=8080")
    assert same.returncode != 0 and "adminPort must differ" in same.stderr


# --------------------------------------------------------------------------- retention


def test_per_topic_retention_reaches_the_topics_job(renders: dict[str, list[Doc]]) -> None:
    values = yaml.safe_load((CI / "everything-values.yaml").read_text())["kafka"]["retentionMs"]
    (topics,) = [
        j for j in by_kind(renders["everything"], "Job").values()
        if j["metadata"]["labels"][COMPONENT] == "topics"
    ]  # fmt: skip
    env = {k: v["value"] for k, v in _env(topics).items() if "value" in v}
    for topic in Topic:
        expected = values["topics"].get(topic.name, values["default"])
        assert retention_for(topic, env) == expected, topic.name
    (plain,) = [
        j for j in by_kind(renders["defaults"], "Job").values()
        if j["metadata"]["labels"][COMPONENT] == "topics"
    ]  # fmt: skip
    env = {k: v["value"] for k, v in _env(plain).items() if "value" in v}
    assert all(retention_for(topic, env) is None for topic in Topic), "broker default"


def test_release_names_hash_is_stable() -> None:
    """The base name of a long release: its first 32 characters and a hash of the whole,
    so a render is reproducible (helm diff, GitOps) and two such releases differ."""
    release = "r" + "x" * 50
    docs = render(VALUE_SETS["defaults"], release=release)
    full = f"{release}-weft"
    base = f"{full[:32]}-{hashlib.sha256(full.encode()).hexdigest()[:6]}"
    assert f"{base}-gateway" in by_kind(docs, "Deployment")
