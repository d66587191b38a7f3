"""Offline checks of the deployment manifests: Dockerfile, docker-compose.yml, Helm chart.

No Docker engine or Kubernetes cluster is needed. The Helm chart is rendered with the
`helm` CLI (PATH or $HOME/.cache/weft/bin/helm, installed by deploy/tools/install-helm.sh)
and every rendered object is validated against the Kubernetes OpenAPI schemas shipped by
the `kubernetes-validate` package.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from weft_platform.kafka_acls import ACCESS, SUPER_USER
from weft_platform.settings import ServiceSettings
from weft_storage.ownership import SERVICE_ROLES

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
CHART = REPO / "helm" / "weft"

# The eight Weft services and their WEFT_HTTP_PORT.
SERVICE_PORTS = {
    "gateway": 8080,
    "agent-config": 8081,
    "engine": 8082,
    "tool-exec": 8083,
    "sandbox": 8084,
    "memory": 8085,
    "suggestions": 8086,
    "knowledge": 8088,
}
# The gateway's projector in its own process (gateway image, `projector` argument).
COMPOSE_PROJECTOR = "projector"
HELM_PROJECTOR = "gateway-projector"
PROJECTOR_PORT = 8087
# knowledge's ingestion workers (knowledge image, `worker` argument).
INGESTION_WORKER = "knowledge-worker"
TEST_DOUBLE = "scripted-llm"  # test double of an OpenAI-compatible LLM, not a Weft service
TEST_DOUBLE_PORT = 8090
INFRA = ("kafka", "postgres", "redis")
JOBS = ("topics", "migrate")

COMMON_REQUIRED_ENV = (
    "WEFT_KAFKA_BOOTSTRAP",
    "WEFT_DATABASE_URL",
    "WEFT_REDIS_URL",
    "WEFT_HTTP_PORT",
)
LLM_REQUIRED_ENV = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "WEFT_LLM_MODEL")
EXTRA_REQUIRED_ENV: dict[str, tuple[str, ...]] = {
    "gateway": ("WEFT_MEMORY_URL", "WEFT_AGENT_CONFIG_URL"),
    "engine": (*LLM_REQUIRED_ENV, "WEFT_MEMORY_URL"),
    "tool-exec": ("WEFT_MEMORY_URL", "WEFT_KNOWLEDGE_URL"),  # no LLM: knowledge embeds
    "knowledge": ("WEFT_MEMORY_URL",),
}
# Optional variables the compose stack sets anyway.
COMPOSE_OPTIONAL_ENV: dict[str, tuple[str, ...]] = {
    "gateway": ("WEFT_DEV_API_KEY", "WEFT_DEV_TENANT"),
    "engine": ("WEFT_EMBEDDING_MODEL",),
    "tool-exec": ("WEFT_EMBEDDING_MODEL",),
}

TOOL_EXEC_GROUP = "weft-tool-exec"
TOOL_CALLS_TOPIC = "weft.tool.calls.v1"

HELM_INSTALL_HINT = (
    "the `helm` CLI is required to validate helm/weft but was found neither in PATH nor at "
    "$HOME/.cache/weft/bin/helm. Install it with `bash deploy/tools/install-helm.sh` (builds "
    "helm with `go install helm.sh/helm/v3/cmd/helm@v3.22.0` into $HOME/.cache/weft/bin; needs "
    "Go and the Go module proxy, ~4 min the first time), or put any helm v3 on PATH."
)
# Kubernetes version to render for, and the schema versions to validate against
# (Chart.yaml: kubeVersion >=1.30: ValidatingAdmissionPolicy v1).
KUBE_VERSION = "1.33.0"
SCHEMA_VERSIONS = ("1.30.0", "1.37.0")


NO_DATABASE = ("engine",)
"""Services with no database role: their state is in Redis (weft_storage.ownership)."""


def required_env(name: str) -> tuple[str, ...]:
    common = tuple(v for v in COMMON_REQUIRED_ENV if not (name in NO_DATABASE and "DATABASE" in v))
    return common + EXTRA_REQUIRED_ENV.get(name, ())


# --------------------------------------------------------------------------- YAML loading


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys (YAML merge keys `<<` aside)."""


def _construct_mapping_no_duplicates(
    loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False
) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    loader.flatten_mapping(node)
    return dict(loader.construct_pairs(node, deep=deep))


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping_no_duplicates
)


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass


def load_yaml_docs(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(text, Loader=_StrictLoader) if doc]


# --------------------------------------------------------------------------- docker compose


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    assert COMPOSE_FILE.is_file(), "docker-compose.yml missing at the repository root"
    data = load_yaml(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    assert isinstance(data.get("services"), dict)
    return data


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) if "=" in item else (item, "") for item in env)
        return {k: v for k, v in pairs}
    return {str(k): str(v) for k, v in env.items()}


def _interpolated_default(value: str) -> str:
    """`${VAR:-default}` -> default (what compose uses when VAR is unset)."""
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?-([^}]*)\}", r"\1", value)


def _depends_on(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {name: {"condition": "service_started"} for name in deps}
    return deps


def _source_dir(service_arg: str) -> Path | None:
    for parent in ("services", "testing"):
        candidate = REPO / parent / service_arg
        if (candidate / "pyproject.toml").is_file():
            return candidate
    return None


def test_compose_names_every_component(compose: dict[str, Any]) -> None:
    names = set(compose["services"])
    expected = {*SERVICE_PORTS, TEST_DOUBLE, *INFRA, *JOBS}
    assert expected <= names, f"missing from docker-compose.yml: {sorted(expected - names)}"


def test_compose_builds_every_weft_image_from_the_root_dockerfile(
    compose: dict[str, Any],
) -> None:
    built = {name: svc for name, svc in compose["services"].items() if "build" in svc}
    assert {*SERVICE_PORTS, TEST_DOUBLE, *JOBS} <= set(built)
    for name, svc in built.items():
        build = svc["build"]
        assert isinstance(build, dict), f"{name}: build must be a mapping"
        assert build.get("context") == ".", f"{name}: build context must be the repo root"
        dockerfile = build.get("dockerfile", "Dockerfile")
        assert (REPO / dockerfile).is_file(), f"{name}: dockerfile {dockerfile} does not exist"
        args = build.get("args") or {}
        if isinstance(args, list):
            args = dict(item.split("=", 1) for item in args)
        service_arg = args.get("SERVICE")
        assert service_arg, f"{name}: build arg SERVICE missing"
        source = _source_dir(service_arg)
        assert source is not None, (
            f"{name}: SERVICE={service_arg} is neither services/{service_arg} "
            f"nor testing/{service_arg}"
        )
        project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
        assert project["name"] == f"weft-{service_arg}"
        assert f"weft-{service_arg}" in project.get("scripts", {}), (
            f"{source}: console script weft-{service_arg} (the image entrypoint) missing"
        )
        if name in SERVICE_PORTS or name == TEST_DOUBLE:
            assert service_arg == name, f"{name}: built with SERVICE={service_arg}"


def test_compose_service_environment(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, port in SERVICE_PORTS.items():
        env = _env(services[name])
        missing = [
            var for var in required_env(name) + COMPOSE_OPTIONAL_ENV.get(name, ()) if var not in env
        ]
        assert not missing, f"{name}: environment lacks {missing}"
        empty = [var for var in required_env(name) if not _interpolated_default(env[var])]
        assert not empty, f"{name}: required variables without a value: {empty}"
        assert env["WEFT_HTTP_PORT"] == str(port)
        assert env["WEFT_KAFKA_BOOTSTRAP"] == "kafka:9092"
        # Its own role, never the migration owner's (weft_storage.ownership); none for
        # the engine.
        if name in NO_DATABASE:
            assert "WEFT_DATABASE_URL" not in env, name
        else:
            role = SERVICE_ROLES[name.replace("-", "_")]
            assert _interpolated_default(env["WEFT_DATABASE_URL"]) == (
                f"postgresql+asyncpg://{role}:{role}@postgres:5432/weft"
            )
        assert env["WEFT_REDIS_URL"] == "redis://redis:6379/0"
        assert env.get("WEFT_LOG_FORMAT") == "json"
        # Services default to 127.0.0.1; in a container they must listen on every interface.
        assert env.get("WEFT_HTTP_HOST") == "0.0.0.0", f"{name}: WEFT_HTTP_HOST must be 0.0.0.0"
        for var in ("WEFT_MEMORY_URL", "WEFT_AGENT_CONFIG_URL"):
            if var in env:
                target = "memory" if var == "WEFT_MEMORY_URL" else "agent-config"
                assert env[var] == f"http://{target}:{SERVICE_PORTS[target]}"
        if "OPENAI_BASE_URL" in env:
            assert _interpolated_default(env["OPENAI_BASE_URL"]) == (
                f"http://{TEST_DOUBLE}:{TEST_DOUBLE_PORT}/v1"
            )


def test_compose_kafka_is_official_image_in_kraft_mode(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    image, _, tag = kafka["image"].partition(":")
    assert image == "apache/kafka"
    assert tag and tag != "latest", "pin the Kafka image version"
    env = _env(kafka)
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    node_id = env["KAFKA_NODE_ID"]
    # the controller listener on the container's loopback (PLAINTEXT: KRaft cannot use SCRAM)
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{node_id}@127.0.0.1:")
    assert (
        "CONTROLLER" in env["KAFKA_LISTENERS"]
        and "CONTROLLER" in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
    )
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] == "CONTROLLER"
    assert "kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    for var in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert env[var] == "1", f"{var} must be 1 on a single node"
    assert env["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] == "0"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    if "CLUSTER_ID" in env:  # base64url of 16 bytes
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", env["CLUSTER_ID"])
    assert not any(k.startswith("KAFKA_ZOOKEEPER") for k in env)


def test_compose_infrastructure_images(compose: dict[str, Any]) -> None:
    services = compose["services"]
    # exact versions: a floating tag changes the database under a `docker compose pull`
    assert re.fullmatch(r"postgres:16\.\d+", services["postgres"]["image"])
    pg_env = _env(services["postgres"])
    assert (pg_env["POSTGRES_USER"], pg_env["POSTGRES_PASSWORD"], pg_env["POSTGRES_DB"]) == (
        "weft",
        "weft",
        "weft",
    )
    assert re.fullmatch(r"redis:7\.\d+\.\d+", services["redis"]["image"])


def test_compose_healthchecks(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in (*INFRA, *SERVICE_PORTS, TEST_DOUBLE):
        check = services[name].get("healthcheck")
        assert check and check.get("test"), f"{name}: healthcheck missing"
        assert not check.get("disable")
    for name, port in {**SERVICE_PORTS, TEST_DOUBLE: TEST_DOUBLE_PORT}.items():
        test = " ".join(services[name]["healthcheck"]["test"])
        assert f":{port}/readyz" in test, f"{name}: healthcheck must probe /readyz on {port}"
        # python:3.11-slim has no curl/wget: probe with the image's own interpreter.
        assert "curl" not in test and "wget" not in test


def test_compose_start_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    valid = {"service_started", "service_healthy", "service_completed_successfully"}
    for name, svc in services.items():
        for dep, spec in _depends_on(svc).items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            assert spec.get("condition") in valid, f"{name} -> {dep}: bad condition"
            if dep in JOBS:
                assert spec["condition"] == "service_completed_successfully"
            elif dep in services and "healthcheck" in services[dep]:
                assert spec["condition"] == "service_healthy", f"{name} -> {dep}"
    assert _depends_on(services["topics"])["kafka"]["condition"] == "service_healthy"
    assert _depends_on(services["migrate"])["postgres"]["condition"] == "service_healthy"
    for name in SERVICE_PORTS:
        deps = _depends_on(services[name])
        missing = {*INFRA, *JOBS} - set(deps)
        assert not missing, f"{name}: does not wait for {sorted(missing)}"
    assert {"memory", "agent-config"} <= set(_depends_on(services["gateway"]))
    assert "memory" in _depends_on(services["engine"])

    # No cycles.
    graph = {name: set(_depends_on(svc)) for name, svc in services.items()}
    state: dict[str, int] = {}

    def visit(node: str, path: tuple[str, ...]) -> None:
        if state.get(node) == 2:
            return
        assert state.get(node) != 1, f"depends_on cycle: {' -> '.join((*path, node))}"
        state[node] = 1
        for dep in graph[node]:
            visit(dep, (*path, node))
        state[node] = 2

    for node in graph:
        visit(node, ())


def test_compose_one_shot_jobs(compose: dict[str, Any]) -> None:
    services = compose["services"]

    def argv(svc: dict[str, Any]) -> str:
        parts: list[str] = []
        for key in ("entrypoint", "command"):
            value = svc.get(key) or []
            parts.extend(value.split() if isinstance(value, str) else value)
        return " ".join(parts)

    assert "python -m weft_platform.topics ensure --bootstrap kafka:9092" in argv(
        services["topics"]
    )
    assert "python -m weft_storage.migrate upgrade" in argv(services["migrate"])
    assert "WEFT_DATABASE_URL" in _env(services["migrate"])
    # It sets each service role's password from that service's URL.
    for svc in SERVICE_ROLES:
        assert f"WEFT_{svc.upper()}_DATABASE_URL" in _env(services["migrate"])
    for job in JOBS:
        assert services[job].get("restart", "no") == "no", f"{job} is one-shot"
        assert not services[job].get("ports")


def test_compose_ports_scaling_and_test_double(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert any(str(p).endswith(":8080") for p in services["gateway"].get("ports", []))
    tool_exec = services["tool-exec"]
    assert tool_exec["deploy"]["replicas"] == "${TOOL_WORKERS:-1}"
    # Replicas cannot share a published host port or a fixed container name.
    assert not tool_exec.get("ports") and not tool_exec.get("container_name")
    command = services[TEST_DOUBLE]["command"]
    command = command.split() if isinstance(command, str) else command
    assert command == ["serve", "--host", "0.0.0.0", "--port", "8090", "--policy", "demo"]


def test_compose_runs_the_projector_apart_from_the_gateway(compose: dict[str, Any]) -> None:
    """The gateway image started with the argument its entry point reads; the gateway then
    leaves projection to it (WEFT_PROJECTOR=off)."""
    from weft_gateway.__main__ import PROJECTOR_ARG

    services = compose["services"]
    projector = services[COMPOSE_PROJECTOR]
    assert projector["build"]["args"]["SERVICE"] == "gateway"
    assert projector["command"] == [PROJECTOR_ARG]
    env = _env(projector)
    assert all(var in env for var in COMMON_REQUIRED_ENV)
    assert env["WEFT_HTTP_PORT"] == str(PROJECTOR_PORT)
    assert f":{PROJECTOR_PORT}/readyz" in " ".join(projector["healthcheck"]["test"])
    assert {*INFRA, *JOBS} <= set(_depends_on(projector))
    assert not projector.get("ports")  # replicas: PROJECTORS=N
    assert _interpolated_default(_env(services["gateway"])["WEFT_PROJECTOR"]) == "off"


# --------------------------------------------------------------------------- Dockerfile


def _workspace_members() -> list[Path]:
    root = tomllib.loads((REPO / "pyproject.toml").read_text())
    members: list[Path] = []
    for pattern in root["tool"]["uv"]["workspace"]["members"]:
        members.extend(p for p in sorted(REPO.glob(pattern)) if (p / "pyproject.toml").is_file())
    return members


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text()
    text = re.sub(r"\\\n", " ", text)  # join continuation lines
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        out.append((op.upper(), rest.strip()))
    return out


def test_compose_runs_ingestion_workers_apart_from_knowledge(compose: dict[str, Any]) -> None:
    """knowledge-worker: the knowledge image with ``worker``, scaled by INGESTION_WORKERS;
    the gateway, tool-exec and agent-config reach the service at its compose name."""
    from weft_knowledge.__main__ import WORKER_ARG

    services = compose["services"]
    worker = services[INGESTION_WORKER]
    assert worker["build"]["args"]["SERVICE"] == "knowledge"
    assert worker["command"] == [WORKER_ARG]
    assert _interpolated_default(str(worker["deploy"]["replicas"])) == "1"
    assert not worker.get("ports")
    # The workers write knowledge's tables: knowledge's role.
    for name in ("knowledge", INGESTION_WORKER):
        url = _interpolated_default(_env(services[name])["WEFT_DATABASE_URL"])
        assert url == "postgresql+asyncpg://weft_knowledge:weft_knowledge@postgres:5432/weft"
    for name in ("gateway", "tool-exec", "agent-config"):
        url = _env(services[name])["WEFT_KNOWLEDGE_URL"]
        assert url == f"http://knowledge:{SERVICE_PORTS['knowledge']}", name


def test_dockerfile_is_multi_stage_and_parameterised() -> None:
    instructions = _dockerfile_instructions()
    froms = [rest for op, rest in instructions if op == "FROM"]
    assert len(froms) >= 2, "builder + runtime stages expected"
    args = " ".join(rest for op, rest in instructions if op == "ARG")
    assert "SERVICE" in args
    assert "python:3.11-slim" in args + " ".join(froms)
    runs = [rest for op, rest in instructions if op == "RUN"]
    assert any("pip install" in r and "uv==0.13.8" in r for r in runs) or (
        "UV_VERSION=0.13.8" in args and any('"uv==${UV_VERSION}"' in r for r in runs)
    )


def test_dockerfile_installs_from_the_lockfile_dependencies_first() -> None:
    instructions = _dockerfile_instructions()
    copies = [(i, rest) for i, (op, rest) in enumerate(instructions) if op == "COPY"]
    assert any("uv.lock" in rest for _, rest in copies), "Dockerfile must COPY uv.lock"
    copied = " ".join(rest for _, rest in copies)
    for member in _workspace_members():
        rel = member.relative_to(REPO).as_posix()
        assert f"{rel}/pyproject.toml" in copied, f"Dockerfile does not copy {rel}/pyproject.toml"

    syncs = [
        (i, rest) for i, (op, rest) in enumerate(instructions) if op == "RUN" and "uv sync" in rest
    ]
    assert len(syncs) == 2, "two `uv sync` steps: dependencies, then the workspace"
    (dep_i, dep_sync), (ws_i, ws_sync) = syncs
    for sync in (dep_sync, ws_sync):
        assert "--frozen" in sync
        assert "--no-dev" in sync
        assert re.search(r"--package\s+\"?weft-\$\{?SERVICE\}?", sync), sync
    assert "--no-install-workspace" in dep_sync
    assert "--no-install-workspace" not in ws_sync
    source_copies = [
        i for i, rest in copies if re.match(r"(--\S+\s+)*(libs|services|testing)/\s", rest)
    ]
    assert source_copies, "sources are never copied"
    assert dep_i < min(source_copies) < ws_i, "dependency layer must come before the sources"


def test_dockerfile_runtime_stage() -> None:
    instructions = _dockerfile_instructions()
    last_from = max(i for i, (op, _) in enumerate(instructions) if op == "FROM")
    runtime = instructions[last_from:]
    users = [rest for op, rest in runtime if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "runtime must not run as root"
    assert any(op == "COPY" and "--from=builder" in rest for op, rest in runtime)
    entrypoints = [rest for op, rest in runtime if op == "ENTRYPOINT"]
    assert entrypoints, "runtime stage needs an ENTRYPOINT"
    text = DOCKERFILE.read_text()
    # The entrypoint resolves to the console script of the SERVICE being built.
    assert re.search(r"/app/\.venv/bin/weft-\$\{SERVICE\}", text)
    assert "weft-service" in entrypoints[-1]


def test_dockerignore_keeps_the_context_small() -> None:
    ignore = (REPO / ".dockerignore").read_text().split()
    for entry in (".git", "**/.venv"):
        assert entry in ignore, f".dockerignore should exclude {entry}"
    for needed in ("uv.lock", "pyproject.toml", "libs", "services", "testing"):
        assert needed not in ignore


# --------------------------------------------------------------------------- Helm


def _find_helm() -> str | None:
    found = shutil.which("helm")
    if found:
        return found
    cached = Path(os.environ.get("HOME", str(Path.home()))) / ".cache" / "weft" / "bin" / "helm"
    return str(cached) if cached.is_file() and os.access(cached, os.X_OK) else None


@pytest.fixture(scope="module")
def helm() -> str:
    path = _find_helm()
    if path is None:
        pytest.fail(HELM_INSTALL_HINT, pytrace=False)
    return path


def _helm_template(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, "template", "weft", str(CHART), "--kube-version", KUBE_VERSION, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _render(helm: str, *args: str) -> list[dict[str, Any]]:
    result = _helm_template(helm, *args)
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return load_yaml_docs(result.stdout)


@pytest.fixture(scope="module")
def test_double_render(helm: str) -> list[dict[str, Any]]:
    return _render(helm, "-f", str(CHART / "ci" / "test-double-values.yaml"))


@pytest.fixture(scope="module")
def production_render(helm: str) -> list[dict[str, Any]]:
    return _render(helm, "-f", str(CHART / "ci" / "production-values.yaml"))


def _by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _iter_renders(
    test_double_render: list[dict[str, Any]], production_render: list[dict[str, Any]]
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    yield "test-double", test_double_render
    yield "production", production_render


def test_helm_cli_available() -> None:
    """Fails (never skips) without helm, so an unvalidated chart cannot pass unnoticed."""
    path = _find_helm()
    if path is None:
        pytest.fail(HELM_INSTALL_HINT, pytrace=False)
    result = subprocess.run(
        [path, "version", "--short"], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, f"{path} does not run: {result.stderr}"
    assert result.stdout.startswith("v3."), f"helm v3 expected, got {result.stdout.strip()}"


def test_helm_lint(helm: str) -> None:
    for values in ("test-double-values.yaml", "production-values.yaml"):
        result = subprocess.run(
            [helm, "lint", str(CHART), "--strict", "-f", str(CHART / "ci" / values)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, f"helm lint ({values}):\n{result.stdout}\n{result.stderr}"


def test_helm_rendered_objects_match_kubernetes_schemas(
    test_double_render: list[dict[str, Any]], production_render: list[dict[str, Any]]
) -> None:
    errors: list[str] = []
    for label, docs in _iter_renders(test_double_render, production_render):
        assert docs, f"{label}: nothing rendered"
        for doc in docs:
            if doc["apiVersion"].startswith("keda.sh/"):
                continue  # CRD: checked by test_helm_keda_scaled_object
            for version in SCHEMA_VERSIONS:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    path = ".".join(str(p) for p in exc.path)
                    errors.append(
                        f"{label}: {doc['kind']}/{doc['metadata']['name']} invalid for "
                        f"Kubernetes {version} at {path}: {exc.message}"
                    )
    assert not errors, "\n".join(errors)


def _container_env(
    container: dict[str, Any], configmaps: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Effective environment: envFrom ConfigMaps (rendered) then explicit env entries."""
    env: dict[str, Any] = {}
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef")
        assert ref, "only ConfigMaps rendered by the chart are expected in envFrom"
        assert ref["name"] in configmaps, f"envFrom references unknown ConfigMap {ref['name']}"
        env.update(configmaps[ref["name"]]["data"])
    for item in container.get("env", []):
        env[item["name"]] = item.get("value", item.get("valueFrom"))
    return env


def test_helm_deployment_and_service_per_weft_service(
    test_double_render: list[dict[str, Any]], production_render: list[dict[str, Any]]
) -> None:
    for label, docs in _iter_renders(test_double_render, production_render):
        deployments = _by_kind(docs, "Deployment")
        services = _by_kind(docs, "Service")
        configmaps = _by_kind(docs, "ConfigMap")
        secrets = _by_kind(docs, "Secret")
        expected = dict(SERVICE_PORTS)
        if label == "test-double":
            expected[TEST_DOUBLE] = TEST_DOUBLE_PORT
        workers = (HELM_PROJECTOR, INGESTION_WORKER)
        assert set(deployments) == {f"weft-{n}" for n in (*expected, *workers)}, label
        for name, port in expected.items():
            deployment = deployments[f"weft-{name}"]
            pod = deployment["spec"]["template"]["spec"]
            (container,) = pod["containers"]
            ctx = f"{label}: {name}"
            assert re.search(rf"/(weft-)?{name}:[\w.-]+$", container["image"]), ctx
            ports = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
            if name != TEST_DOUBLE:  # a Weft service's metrics port: its settings' default
                metrics = ServiceSettings(http_port=port).effective_metrics_port
                ports.append({"name": "metrics", "containerPort": metrics, "protocol": "TCP"})
            assert container["ports"] == ports, ctx
            env = _container_env(container, configmaps)
            if name != TEST_DOUBLE:
                assert env["WEFT_METRICS_PORT"] == str(ports[1]["containerPort"]), ctx
                assert env["WEFT_METRICS_HOST"] == "0.0.0.0", ctx
                missing = [var for var in required_env(name) if var not in env]
                assert not missing, f"{ctx}: environment lacks {missing}"
                assert env["WEFT_HTTP_PORT"] == str(port), ctx
                assert env["WEFT_HTTP_HOST"] == "0.0.0.0", ctx
                # Its own database role's URL (weft_storage.ownership), never the owner's;
                # the engine none.
                keys = {v: v for v in ("OPENAI_API_KEY",) if v in env}
                if name in NO_DATABASE:
                    assert "WEFT_DATABASE_URL" not in env, ctx
                else:
                    db_key = f"WEFT_{name.upper().replace('-', '_')}_DATABASE_URL"
                    keys["WEFT_DATABASE_URL"] = db_key
                for var, key in keys.items():
                    ref = env[var]["secretKeyRef"]
                    assert ref["key"] == key, ctx
                    if label == "test-double":
                        assert ref["name"] in secrets and key in secrets[ref["name"]]["stringData"]
                    else:
                        assert ref["name"] == "weft-credentials", ctx
            for var in ("WEFT_MEMORY_URL", "WEFT_AGENT_CONFIG_URL"):
                if var in env:
                    target = "memory" if var == "WEFT_MEMORY_URL" else "agent-config"
                    assert env[var] == f"http://weft-{target}:{SERVICE_PORTS[target]}", ctx
            readiness = container["readinessProbe"]["httpGet"]
            liveness = container["livenessProbe"]["httpGet"]
            assert (readiness["path"], readiness["port"]) == ("/readyz", "http"), ctx
            assert (liveness["path"], liveness["port"]) == ("/healthz", "http"), ctx
            resources = container["resources"]
            assert resources.get("requests") and resources.get("limits"), ctx
            assert pod["securityContext"]["runAsNonRoot"] is True, ctx

            service = services[f"weft-{name}"]
            assert service["spec"]["selector"].items() <= (
                deployment["spec"]["template"]["metadata"]["labels"].items()
            ), ctx
            assert deployment["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
            assert service["spec"]["ports"][0]["port"] == port, ctx
            assert service["spec"]["ports"][0]["targetPort"] == "http", ctx
            served = [(p["port"], p["targetPort"]) for p in service["spec"]["ports"][1:]]
            assert served == [(p["containerPort"], p["name"]) for p in ports[1:]], ctx

        if label == "test-double":
            llm_env = _container_env(
                deployments["weft-engine"]["spec"]["template"]["spec"]["containers"][0], configmaps
            )
            assert llm_env["OPENAI_BASE_URL"] == f"http://weft-{TEST_DOUBLE}:{TEST_DOUBLE_PORT}/v1"
            (double,) = deployments[f"weft-{TEST_DOUBLE}"]["spec"]["template"]["spec"]["containers"]
            assert double["args"] == [
                "serve",
                "--host",
                "0.0.0.0",
                "--port",
                "8090",
                "--policy",
                "demo",
            ]
        else:
            assert not secrets, "with secrets.existingSecret the chart must not create Secrets"


def test_helm_projector_deployment_and_gateway_mode(
    helm: str, test_double_render: list[dict[str, Any]]
) -> None:
    """A projector Deployment (gateway image, own replica count, no Service) and gateways
    with WEFT_PROJECTOR=off; disabling it makes the gateways project again (embedded)."""
    from weft_gateway.__main__ import PROJECTOR_ARG

    deployments = _by_kind(test_double_render, "Deployment")
    projector = deployments[f"weft-{HELM_PROJECTOR}"]
    (container,) = projector["spec"]["template"]["spec"]["containers"]
    assert container["args"] == [PROJECTOR_ARG]
    assert re.search(r"/weft-gateway:[\w.-]+$", container["image"])
    assert container["ports"][0]["containerPort"] == PROJECTOR_PORT
    assert projector["spec"]["replicas"] == 2  # a drain must not stop the projection
    assert f"weft-{HELM_PROJECTOR}" not in _by_kind(test_double_render, "Service")
    configmaps = _by_kind(test_double_render, "ConfigMap")
    env = _container_env(container, configmaps)
    assert all(var in env for var in COMMON_REQUIRED_ENV)
    gateway = deployments["weft-gateway"]["spec"]["template"]["spec"]["containers"][0]
    assert _container_env(gateway, configmaps)["WEFT_PROJECTOR"] == "off"

    embedded = _render(
        helm,
        "-f",
        str(CHART / "ci" / "test-double-values.yaml"),
        "--set",
        f"services.{HELM_PROJECTOR}.enabled=false",
        "--set",
        "services.gateway.replicas=3",
    )
    deployments = _by_kind(embedded, "Deployment")
    assert f"weft-{HELM_PROJECTOR}" not in deployments
    gateway = deployments["weft-gateway"]["spec"]["template"]["spec"]["containers"][0]
    assert "WEFT_PROJECTOR" not in _container_env(gateway, _by_kind(embedded, "ConfigMap"))


def test_helm_ingestion_workers_deployment_scaling_and_network(
    test_double_render: list[dict[str, Any]], production_render: list[dict[str, Any]]
) -> None:
    """knowledge-worker: the knowledge image with ``worker``, no Service, logged in to
    Kafka as weft-knowledge; KEDA scales it on the queue depth metric (Prometheus) and
    then owns its replicas; knowledge takes calls from the gateway, tool-exec and
    agent-config only, and reaches memory."""
    from weft_knowledge.__main__ import WORKER_ARG
    from weft_platform.metrics import INGESTION_QUEUE_DEPTH

    deployments = _by_kind(test_double_render, "Deployment")
    worker = deployments[f"weft-{INGESTION_WORKER}"]
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    assert container["args"] == [WORKER_ARG]
    assert re.search(r"/(weft-)?knowledge:[\w.-]+$", container["image"])
    env = _container_env(container, _by_kind(test_double_render, "ConfigMap"))
    assert env["WEFT_HTTP_PORT"] == str(SERVICE_PORTS["knowledge"])
    db = env["WEFT_DATABASE_URL"]["secretKeyRef"]["key"]
    assert db == "WEFT_KNOWLEDGE_DATABASE_URL"  # knowledge's role, as the service's
    assert f"weft-{INGESTION_WORKER}" not in _by_kind(test_double_render, "Service")
    assert worker["spec"]["replicas"] == 1
    knowledge_env = _container_env(
        deployments["weft-knowledge"]["spec"]["template"]["spec"]["containers"][0],
        _by_kind(test_double_render, "ConfigMap"),
    )
    assert knowledge_env["WEFT_MEMORY_URL"] == f"http://weft-memory:{SERVICE_PORTS['memory']}"
    for caller in ("gateway", "tool-exec", "agent-config"):
        caller_env = _container_env(
            deployments[f"weft-{caller}"]["spec"]["template"]["spec"]["containers"][0],
            _by_kind(test_double_render, "ConfigMap"),
        )
        assert caller_env["WEFT_KNOWLEDGE_URL"] == "http://weft-knowledge:8088", caller
    policy = _by_kind(test_double_render, "NetworkPolicy")["weft-knowledge"]["spec"]
    callers = {
        peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        for rule in policy["ingress"]
        for peer in rule.get("from", [])
        if "podSelector" in peer
        and "app.kubernetes.io/component" in peer["podSelector"].get("matchLabels", {})
    }
    assert callers == {"gateway", "tool-exec", "agent-config"}

    production = _by_kind(production_render, "Deployment")[f"weft-{INGESTION_WORKER}"]
    assert "replicas" not in production["spec"], "KEDA owns the workers' replica count"
    scaled = _by_kind(production_render, "ScaledObject")[f"weft-{INGESTION_WORKER}"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == f"weft-{INGESTION_WORKER}"
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert all(isinstance(v, str) for v in trigger["metadata"].values())
    assert trigger["metadata"]["query"].startswith(f"max({INGESTION_QUEUE_DEPTH._name}{{")
    assert 'state="pending"' in trigger["metadata"]["query"]


def test_helm_migrate_and_topics_jobs_are_hooks(
    test_double_render: list[dict[str, Any]], production_render: list[dict[str, Any]]
) -> None:
    for label, docs in _iter_renders(test_double_render, production_render):
        jobs = _by_kind(docs, "Job")
        assert set(jobs) == {"weft-topics", "weft-migrate"}, label
        commands = {}
        for name, job in jobs.items():
            annotations = job["metadata"]["annotations"]
            assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
            (container,) = job["spec"]["template"]["spec"]["containers"]
            commands[name] = " ".join(container["command"])
            assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
            env = {e["name"]: e for e in container["env"]}
            assert {"WEFT_KAFKA_BOOTSTRAP", "WEFT_DATABASE_URL"} <= set(env), f"{label}: {name}"
            secret_name = env["WEFT_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"]
            if label == "test-double":
                # The release's own resources do not exist yet when pre-install hooks run:
                # the jobs must only reference hook resources that sort before them.
                hook_secret = _by_kind(docs, "Secret")[secret_name]
                weight = int(hook_secret["metadata"]["annotations"]["helm.sh/hook-weight"])
                assert weight < int(annotations["helm.sh/hook-weight"])
                assert "WEFT_DATABASE_URL" in hook_secret["stringData"]
        assert commands["weft-migrate"] == "python -m weft_storage.migrate upgrade"
        assert commands["weft-topics"].startswith(
            "python -m weft_platform.topics ensure --bootstrap "
        )


def test_helm_keda_scaled_object(
    test_double_render: list[dict[str, Any]], production_render: list[dict[str, Any]]
) -> None:
    from weft_contracts.topics import Topic  # the topic the chart names must exist in code

    assert not _by_kind(test_double_render, "ScaledObject"), "KEDA must be off by default"
    scaled = _by_kind(production_render, "ScaledObject")["weft-tool-exec"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    spec = scaled["spec"]
    assert spec["scaleTargetRef"]["name"] == "weft-tool-exec"
    assert spec["scaleTargetRef"].get("kind", "Deployment") == "Deployment"
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "kafka"
    meta = trigger["metadata"]
    assert all(isinstance(v, str) for v in meta.values()), "KEDA trigger metadata are strings"
    assert meta["consumerGroup"] == TOOL_EXEC_GROUP
    assert meta["topic"] == TOOL_CALLS_TOPIC == Topic.TOOL_CALLS.value
    assert int(meta["lagThreshold"]) == 25
    assert meta["bootstrapServers"] == "kafka-0.kafka:9092,kafka-1.kafka:9092,kafka-2.kafka:9092"
    version = tuple(int(p) for p in meta["version"].split("."))
    assert version >= (2, 1, 0), "Kafka 4 needs KEDA's Kafka protocol version >= 2.1.0"
    # KEDA owns the replica count: the Deployment must not set one.
    tool_exec = _by_kind(production_render, "Deployment")["weft-tool-exec"]
    assert "replicas" not in tool_exec["spec"]
    # The production values' broker wants SASL_SSL logins: KEDA logs in as weft-tool-exec
    # (whose ACLs let it read its group's offsets), with the password of tool-exec's own
    # login and the brokers' CA, through a TriggerAuthentication the ScaledObject names.
    (auth,) = _by_kind(production_render, "TriggerAuthentication").values()
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    refs = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    plain = {r["parameter"]: r["key"] for r in auth["spec"]["configMapTargetRef"]}
    env = {e["name"]: e for e in tool_exec["spec"]["template"]["spec"]["containers"][0]["env"]}
    login = env["WEFT_KAFKA_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert refs["password"] == (login["name"], login["key"]) == (login["name"], "weft-tool-exec")
    assert refs["ca"] == ("weft-kafka-tls", "ca.crt")
    config = _by_kind(production_render, "ConfigMap")[auth["metadata"]["name"]]["data"]
    assert {p: config[k] for p, k in plain.items()} == {
        "sasl": "scram_sha512", "username": "weft-tool-exec", "tls": "enable",
    }  # fmt: skip
    assert env["WEFT_KAFKA_USERNAME"]["value"] == "weft-tool-exec"


def test_helm_refuses_incomplete_values(helm: str) -> None:
    result = _helm_template(helm)
    assert result.returncode != 0, "rendering without Kafka/Postgres/Redis/LLM values must fail"
    assert "is required" in result.stderr

    base = ["-f", str(CHART / "ci" / "test-double-values.yaml")]
    no_llm = _helm_template(helm, *base, "--set", "services.scripted-llm.enabled=false")
    assert no_llm.returncode != 0 and "llm.baseUrl is required" in no_llm.stderr

    old_protocol = _helm_template(
        helm,
        *base,
        "--set",
        "keda.toolExec.enabled=true",
        "--set",
        "keda.toolExec.kafkaVersion=1.0.0",
    )
    assert old_protocol.returncode != 0 and "2.1.0" in old_protocol.stderr

    # Each service its own database role: a missing URL fails (no fallback to the owner's).
    for service in ("memory", "knowledge"):
        no_url = _helm_template(helm, *base, "--set", f"postgres.serviceUrls.{service}=")
        assert no_url.returncode != 0, service
        assert f"postgres.serviceUrls.{service} is required" in no_url.stderr


def test_helm_migrate_hook_gets_the_owner_url_and_every_services_url(helm: str) -> None:
    docs = _render(helm, "-f", str(CHART / "ci" / "test-double-values.yaml"))
    job = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == "weft-migrate")
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["WEFT_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["key"] == "WEFT_DATABASE_URL"
    hook = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "weft-hooks")
    for service in SERVICE_ROLES:
        key = f"WEFT_{service.upper()}_DATABASE_URL"
        assert env[key]["valueFrom"]["secretKeyRef"]["key"] == key
        assert f"//{SERVICE_ROLES[service]}:" in hook["stringData"][key]
    assert (
        "WEFT_ENGINE_DATABASE_URL" not in env
        and "WEFT_ENGINE_DATABASE_URL" not in hook["stringData"]
    )
    # The services' Secret does not hold the migration owner's URL.
    release = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "weft")
    assert "WEFT_DATABASE_URL" not in release["stringData"]


# ---- who installs helm ---------------------------------------------------------------------


def _dry_run(target: str) -> list[str]:
    result = subprocess.run(
        ["make", "-n", target], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_only_the_chart_tests_path_installs_helm() -> None:
    """Building helm (`go install`) took ~2.5 of a fresh `make demo`'s 3.6 minutes though
    the demo never renders the chart: bootstrap (run by up/demo) does not install it;
    `make test-unit`, which `make test` runs, ensures it before the chart tests."""
    bootstrap = (REPO / "deploy" / "local" / "bootstrap.sh").read_text().splitlines()
    code = [line for line in bootstrap if not line.lstrip().startswith("#")]
    assert not [line for line in code if "helm" in line], "bootstrap.sh installs helm"
    unit = _dry_run("test-unit")
    ensure = unit.index("deploy/local/ensure-helm.sh")
    assert ensure < next(i for i, line in enumerate(unit) if "pytest tests/unit" in line)
    for target in ("demo", "up"):
        assert not [line for line in _dry_run(target) if "helm" in line], target


def _ensure_helm(tmp_path: Path, path: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run ensure-helm.sh against a copy of the scripts whose install-helm.sh only leaves
    a marker (the real one builds helm for minutes)."""
    local = tmp_path / "repo" / "deploy" / "local"
    tools = tmp_path / "repo" / "deploy" / "tools"
    local.mkdir(parents=True)
    tools.mkdir(parents=True)
    shutil.copy(REPO / "deploy" / "local" / "lib.sh", local / "lib.sh")
    marker = tmp_path / "installed"
    installer = tools / "install-helm.sh"
    installer.write_text(f"#!/usr/bin/env bash\ntouch {marker}\n")
    installer.chmod(0o755)
    env = {**os.environ, "PATH": path, "WEFT_REPO": str(tmp_path / "repo"),
           "WEFT_CACHE": str(tmp_path / "cache")}  # fmt: skip
    script = REPO / "deploy" / "local" / "ensure-helm.sh"
    result = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60)
    return result, marker


def test_ensure_helm_installs_only_when_helm_is_missing(tmp_path: Path) -> None:
    without_helm = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "helm").exists()
    )
    result, marker = _ensure_helm(tmp_path / "missing", without_helm)
    assert result.returncode == 0 and marker.exists(), result.stderr
    fake = tmp_path / "bin" / "helm"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho v3.22.0\n")
    fake.chmod(0o755)
    result, marker = _ensure_helm(tmp_path / "present", f"{fake.parent}{os.pathsep}{without_helm}")
    assert result.returncode == 0 and result.stdout == "" and not marker.exists(), result.stdout


def test_helm_each_service_logs_in_to_kafka_as_its_own_principal(
    test_double_render: list[dict[str, Any]], production_render: list[dict[str, Any]]
) -> None:
    """SASL_SSL (production values): weft-<service> with its password from the Kafka users'
    Secret, the brokers' CA mounted; the topics job as the super user; the durability of
    new topics. Every principal is one the ACL table knows (weft_platform.kafka_acls)."""
    logins: dict[str, str] = {}
    for name, deployment in _by_kind(production_render, "Deployment").items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        if "WEFT_KAFKA_USERNAME" not in env:
            assert name == "weft-scripted-llm", f"{name} has no Kafka login"
            continue
        principal = env["WEFT_KAFKA_USERNAME"]["value"]
        logins[name] = principal
        assert env["WEFT_KAFKA_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
        secret = env["WEFT_KAFKA_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert (secret["name"], secret["key"]) == ("weft-kafka-users", principal)
        assert env["WEFT_KAFKA_SSL_CAFILE"]["value"] == "/etc/weft/kafka-tls/ca.crt"
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["kafka-tls"] == "/etc/weft/kafka-tls"
    assert logins["weft-gateway-projector"] == "weft-gateway"
    assert logins["weft-tool-exec"] == "weft-tool-exec"
    assert set(logins.values()) <= set(ACCESS), "a principal the ACL table does not know"
    (topics,) = [
        job for name, job in _by_kind(production_render, "Job").items() if "topics" in name
    ]
    (container,) = topics["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["WEFT_KAFKA_USERNAME"] == SUPER_USER
    assert (env["WEFT_TOPIC_REPLICATION_FACTOR"], env["WEFT_TOPIC_MIN_INSYNC_REPLICAS"]) == (
        "3",
        "2",
    )
    for name, deployment in _by_kind(test_double_render, "Deployment").items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert "WEFT_KAFKA_PASSWORD" not in env, f"{name}: PLAINTEXT takes no login"


def test_helm_sandbox_kubernetes_backend_rbac_and_network(
    production_render: list[dict[str, Any]],
) -> None:
    """sandbox.backend=kubernetes (production values): the sandbox alone gets a token, for
    its own ServiceAccount, bound to a Role in the session pods' own namespace (Pod Security
    `restricted`) with exactly the verbs the backend uses; the pods there are denied all
    traffic; the sandbox may reach the API server. The admission policies are checked in
    test_sandbox_admission.py."""
    (namespace,) = _by_kind(production_render, "Namespace").values()
    assert namespace["metadata"]["name"] == "weft-sandboxes"
    labels = namespace["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted", mode
    roles = _by_kind(production_render, "Role")
    role = roles["weft-sandbox-pods"]
    assert role["metadata"]["namespace"] == "weft-sandboxes"
    rules = {tuple(r["resources"]): sorted(r["verbs"]) for r in role["rules"]}
    assert rules == {
        ("pods",): ["create", "delete", "get", "list", "patch"],
        ("pods/exec",): ["create", "get"],
    }
    assert all(r["apiGroups"] == [""] for r in role["rules"])
    assert list(roles) == ["weft-sandbox-pods"] and not _by_kind(production_render, "ClusterRole")
    (binding,) = _by_kind(production_render, "RoleBinding").values()
    assert binding["metadata"]["namespace"] == "weft-sandboxes"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "weft-sandbox-pods"
    }  # fmt: skip
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "weft-sandbox", "namespace": "default"}
    ]
    assert "weft-sandbox" in _by_kind(production_render, "ServiceAccount")
    assert not _by_kind(production_render, "ClusterRoleBinding")

    deployments = _by_kind(production_render, "Deployment")
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        if name == "weft-sandbox":
            assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == (
                "weft-sandbox", True
            )  # fmt: skip
            env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
            assert env["WEFT_SANDBOX_BACKEND"] == "kubernetes"
            assert env["WEFT_SANDBOX_K8S_NAMESPACE"] == "weft-sandboxes"
            assert env["WEFT_SANDBOX_K8S_RUNTIME_CLASS"] == "gvisor"
            assert env["WEFT_SANDBOX_ROOT"] == "/var/lib/weft/sandbox"  # read-only root fs
            mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
            assert mounts["sandbox-copies"] == "/var/lib/weft/sandbox"
            volumes = {v["name"]: v for v in pod["volumes"]}
            assert volumes["sandbox-copies"]["emptyDir"] == {"sizeLimit": "4Gi"}
        else:
            assert pod["automountServiceAccountToken"] is False, name

    policies = _by_kind(production_render, "NetworkPolicy")
    sessions = policies["weft-sandbox-sessions"]
    assert sessions["metadata"]["namespace"] == "weft-sandboxes"
    assert sessions["spec"] == {
        "podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": [],
    }  # fmt: skip
    egress_ports = [
        [p["port"] for p in rule.get("ports", [])]
        for rule in policies["weft-sandbox"]["spec"]["egress"]
    ]
    assert [443, 6443] in egress_ports


def test_helm_default_sandbox_is_the_kubernetes_backend_in_its_own_namespace(
    test_double_render: list[dict[str, Any]],
) -> None:
    """The chart's defaults (the test-double values set no sandbox value) run a sandbox that
    can work under the pods' security context: the Kubernetes backend, its namespace
    <release>-sandboxes created with Pod Security `restricted`, its admission policies."""
    sandbox = _by_kind(test_double_render, "Deployment")["weft-sandbox"]["spec"]["template"]
    env = {e["name"]: e.get("value") for e in sandbox["spec"]["containers"][0]["env"]}
    assert env["WEFT_SANDBOX_BACKEND"] == "kubernetes"
    assert env["WEFT_SANDBOX_K8S_NAMESPACE"] == "weft-sandboxes"
    assert sandbox["spec"]["serviceAccountName"] == "weft-sandbox"
    (namespace,) = _by_kind(test_double_render, "Namespace")
    assert namespace == "weft-sandboxes"
    assert _by_kind(test_double_render, "Role")["weft-sandbox-pods"]["metadata"]["namespace"] == (
        "weft-sandboxes"
    )
    assert set(_by_kind(test_double_render, "ValidatingAdmissionPolicy")) == {
        "weft-sandboxes-pods", "weft-sandboxes-exec"
    }  # fmt: skip
    assert set(_by_kind(test_double_render, "ValidatingAdmissionPolicyBinding")) == {
        "weft-sandboxes-pods", "weft-sandboxes-exec"
    }  # fmt: skip


def test_helm_sandbox_none_renders_no_pod_rights(helm: str) -> None:
    """sandbox.backend=none: no namespace, Role, binding or policy; the sandbox keeps no
    token and its tools answer that no sandbox is configured."""
    docs = _render(helm, "-f", str(CHART / "ci" / "test-double-values.yaml"),
                   "--set", "sandbox.backend=none")  # fmt: skip
    for kind in ("Namespace", "Role", "RoleBinding", "ValidatingAdmissionPolicy",
                 "ValidatingAdmissionPolicyBinding"):  # fmt: skip
        assert not _by_kind(docs, kind), kind
    assert "weft-sandbox-sessions" not in _by_kind(docs, "NetworkPolicy")
    sandbox = _by_kind(docs, "Deployment")["weft-sandbox"]["spec"]["template"]["spec"]
    assert sandbox["automountServiceAccountToken"] is False
    env = {e["name"]: e.get("value") for e in sandbox["containers"][0]["env"]}
    assert env["WEFT_SANDBOX_BACKEND"] == "none"
    assert "WEFT_SANDBOX_K8S_NAMESPACE" not in env


def test_helm_sandbox_existing_namespace(helm: str) -> None:
    """createNamespace=false: the chart expects the namespace (helm install checks its Pod
    Security label; helm template cannot look it up) and renders the rest into it."""
    docs = _render(helm, "-f", str(CHART / "ci" / "production-values.yaml"),
                   "--set", "sandbox.kubernetes.createNamespace=false")  # fmt: skip
    assert not _by_kind(docs, "Namespace")
    assert _by_kind(docs, "Role")["weft-sandbox-pods"]["metadata"]["namespace"] == (
        "weft-sandboxes"
    )


def test_helm_refuses_a_sandbox_that_cannot_run_or_is_not_confined(helm: str) -> None:
    """The local backend (bubblewrap) cannot create namespaces under the pods' security
    context, and the session pods may not share the release's namespace: both refused at
    render time with the reason."""
    base = ["-f", str(CHART / "ci" / "test-double-values.yaml")]
    for backend in ("local", ""):
        result = _helm_template(helm, *base, "--set", f"sandbox.backend={backend}")
        assert result.returncode != 0, backend
        assert "needs user namespaces" in result.stderr, result.stderr
        assert "sandbox.backend=kubernetes" in result.stderr
    shared = _helm_template(helm, *base, "--set", "sandbox.kubernetes.namespace=default")
    assert shared.returncode != 0 and "namespace of their own" in shared.stderr, shared.stderr


def test_helm_fails_closed_without_the_mcp_secret_keys(
    helm: str, test_double_render: list[dict[str, Any]]
) -> None:
    """docs/mcp.md: no chart renders agent-config without the key of its MCP secrets, and
    only agent-config reads it (from the Secret, never a ConfigMap)."""
    values = str(CHART / "ci" / "test-double-values.yaml")
    missing = _helm_template(helm, "-f", values, "--set", "mcp.secretKeys=")
    assert missing.returncode != 0 and "mcp.secretKeys is required" in missing.stderr
    readers = {}
    for name, deployment in _by_kind(test_double_render, "Deployment").items():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            for env in container.get("env", []):
                if env["name"] == "WEFT_MCP_SECRET_KEYS":
                    readers[name] = env["valueFrom"]["secretKeyRef"]["key"]
    assert readers == {"weft-agent-config": "WEFT_MCP_SECRET_KEYS"}
    configmaps = _by_kind(test_double_render, "ConfigMap").values()
    assert all("WEFT_MCP_SECRET_KEYS" not in (c.get("data") or {}) for c in configmaps)


def test_compose_passes_the_tracing_settings(compose: dict[str, Any]) -> None:
    for name in SERVICE_PORTS:
        env = _env(compose["services"][name])
        assert _interpolated_default(env["WEFT_TRACING_SAMPLE_RATIO"]) == "0.1"
        assert "OTEL_EXPORTER_OTLP_ENDPOINT" in env  # empty by default: no exporter


def test_helm_tracing_settings_and_collector_egress(
    helm: str, test_double_render: list[dict[str, Any]]
) -> None:
    (common,) = [
        c for name, c in _by_kind(test_double_render, "ConfigMap").items()
        if name.endswith("-common")
    ]  # fmt: skip
    assert common["data"]["WEFT_TRACING_EXPORTER"] == "none"
    assert common["data"]["WEFT_TRACING_SAMPLE_RATIO"] == "0.1"
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in common["data"]
    docs = _render(
        helm, "-f", str(CHART / "ci" / "production-values.yaml"),
        "--set", "tracing.otlpEndpoint=http://otel-collector.observability:4318",
        "--set", "tracing.sampleRatio=0.25",
        # the tool workers reach no unnamed private address: the collector is named
        "--set-json", 'networkPolicy.tracing.to=[{"ipBlock":{"cidr":"10.50.0.0/24"}}]',
    )  # fmt: skip
    (common,) = [c for name, c in _by_kind(docs, "ConfigMap").items() if name.endswith("-common")]
    assert common["data"]["WEFT_TRACING_EXPORTER"] == "otlp"
    assert (
        common["data"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability:4318"
    )
    assert common["data"]["WEFT_TRACING_SAMPLE_RATIO"] == "0.25"
    policies = _by_kind(docs, "NetworkPolicy")
    for name in SERVICE_PORTS:
        (policy,) = [p for n, p in policies.items() if n.endswith(f"-{name}")]
        ports = [p.get("port") for rule in policy["spec"]["egress"] for p in rule.get("ports", [])]
        assert 4318 in ports, f"{name}: no egress to the collector"
