"""The network layer (ARCHITECTURE invariant 5): only the gateway is reachable from outside
the release, each internal port only from the services that call it, and the tool workers
reach the internet but never cloud metadata or private ranges.

Threat: a network neighbour (any pod of the cluster, a container of the compose network's
host) calls memory's or agent-config's internal routes directly, and a prompt-injected
model makes a tool worker fetch the cloud metadata endpoint or an internal address.

The chart is rendered offline (`helm template`) and its NetworkPolicies are evaluated here
as a CNI would: a pod is isolated by every policy whose selector matches its labels, and
may do what any of them allows. The expected callers of each port come from the code (the
services' settings and the tools' environment), not from the chart. Enforcement needs a
CNI that implements NetworkPolicy and is not verified on a cluster here.
"""

from __future__ import annotations

import inspect
import ipaddress
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import weft_tools
from pydantic_settings import BaseSettings
from weft_agent_config.app import AgentConfigSettings
from weft_engine.settings import EngineSettings
from weft_gateway.app import create_projector_app
from weft_gateway.settings import GatewaySettings
from weft_knowledge.settings import KnowledgeSettings
from weft_memory.app import MemorySettings
from weft_sandbox.app import SandboxSettings
from weft_suggestions.app import SuggestionsSettings
from weft_tool_exec.settings import ToolExecSettings

from tests.unit.test_deploy_manifests import (
    CHART,
    COMPOSE_FILE,
    HELM_INSTALL_HINT,
    KUBE_VERSION,
    SCHEMA_VERSIONS,
    SERVICE_PORTS,
    _find_helm,
    load_yaml,
    load_yaml_docs,
)

Doc = dict[str, Any]

TEST_DOUBLE = "scripted-llm"
PROJECTOR = "gateway-projector"
GATEWAY = "gateway"
TOOL_WORKERS = ("tool-exec", "sandbox", "agent-config")  # agent-config: MCP servers (T-19)

# Each Weft process and the settings it reads. The projector reads the gateway's settings
# but wires no client of another service (checked in test_caller_table_from_code).
PROCESS_SETTINGS: dict[str, type[BaseSettings]] = {
    "gateway": GatewaySettings,
    "agent-config": AgentConfigSettings,
    "engine": EngineSettings,
    "tool-exec": ToolExecSettings,
    "sandbox": SandboxSettings,
    "memory": MemorySettings,
    "suggestions": SuggestionsSettings,
    "knowledge": KnowledgeSettings,
    "knowledge-worker": KnowledgeSettings,
}
# What a process's settings name but it never calls (none today: knowledge's ingestion
# workers meter graph extraction's and wiki generation's model calls in memory).
NOT_CALLED: dict[str, set[str]] = {}
# weft_tools' implementations run in tool-exec (weft_tools.builtin); the URLs they read
# from the environment are tool-exec's calls.
TOOLS_PROCESS = "tool-exec"
LLM_URL_ALIAS = "OPENAI_BASE_URL"

METADATA = ("169.254.169.254", "fd00:ec2::254")
# What a tool worker must never reach on any port, independent of values.yaml.
PRIVATE_RANGES = (
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "fc00::/7",
    "fe80::/10",
)

RELEASE = "weft"
RELEASE_LABELS = {"app.kubernetes.io/name": "weft", "app.kubernetes.io/instance": RELEASE}
COMPONENT = "app.kubernetes.io/component"
OUTSIDE = "<outside the release>"


# --------------------------------------------------------------------------- callers from code


def _url_callees(settings: type[BaseSettings]) -> set[str]:
    """Weft services whose URL a settings class holds (``<service>_url`` fields)."""
    names = {
        name.removesuffix("_url").replace("_", "-")
        for name in settings.model_fields
        if name.endswith("_url")
    }
    return names & set(SERVICE_PORTS)


def _calls_the_llm(settings: type[BaseSettings]) -> bool:
    for field in settings.model_fields.values():
        alias = field.validation_alias
        choices = getattr(alias, "choices", [alias])
        if LLM_URL_ALIAS in choices:
            return True
    return False


def _tools_env_callees() -> set[str]:
    """Weft services whose ``WEFT_<NAME>_URL`` the tool implementations name."""
    found: set[str] = set()
    for source in Path(weft_tools.__file__).parent.glob("*.py"):
        for var in re.findall(r"[\"']WEFT_([A-Z_]+)_URL[\"']", source.read_text()):
            found.add(var.lower().replace("_", "-"))
    return found & set(SERVICE_PORTS)


def callers_from_code() -> dict[str, set[str]]:
    """Callee -> the processes that call it over HTTP (the LLM test double included)."""
    callers: dict[str, set[str]] = {name: set() for name in (*SERVICE_PORTS, TEST_DOUBLE)}
    callers[PROJECTOR] = set()
    callers["knowledge-worker"] = set()  # no Service: nothing calls a worker
    for process, settings in PROCESS_SETTINGS.items():
        for callee in _url_callees(settings) - NOT_CALLED.get(process, set()):
            callers[callee].add(process)
        if _calls_the_llm(settings):
            callers[TEST_DOUBLE].add(process)
    for callee in _tools_env_callees():
        callers[callee].add(TOOLS_PROCESS)
    return callers


def callees_from_code() -> dict[str, set[str]]:
    callees: dict[str, set[str]] = {}
    for callee, callers in callers_from_code().items():
        callees.setdefault(callee, set())
        for caller in callers:
            callees.setdefault(caller, set()).add(callee)
    return callees


def test_caller_table_from_code() -> None:
    """The table the policies are checked against, pinned so a new client shows up here
    (and in the chart's `uses`) rather than as a denied call in production."""
    callers = callers_from_code()
    # memory: sandbox and suggestions ask whose a session is; knowledge meters documents,
    # its workers graph extraction's and wiki generation's model calls
    assert callers["memory"] == {"gateway", "engine", "tool-exec", "sandbox", "suggestions",
                                 "knowledge", "knowledge-worker"}  # fmt: skip
    # agent-config: MCP (T-19) for tool-exec, skill packages for the sandbox
    assert callers["agent-config"] == {"gateway", "suggestions", "tool-exec", "sandbox"}
    assert callers["suggestions"] == {"gateway"}
    assert callers["sandbox"] == {"gateway", "memory"}  # session files; fork and rollback
    # knowledge: the gateway's routes, tool-exec's knowledge tools, agent-config's KB guard
    assert callers["knowledge"] == {"gateway", "tool-exec", "agent-config"}
    # the LLM: tool-exec no more (embeddings and reranking moved to knowledge)
    assert callers[TEST_DOUBLE] == {"engine", "memory", "suggestions", "knowledge",
                                    "knowledge-worker"}  # fmt: skip
    assert callers[GATEWAY] == {"memory"}  # the prompt timer's credential renewal
    for service in ("engine", "tool-exec", PROJECTOR, "knowledge-worker"):
        assert callers[service] == set(), service
    projector = inspect.getsource(create_projector_app)
    assert "_url" not in projector, "the projector now calls a service: give it `uses`"


# --------------------------------------------------------------------------- rendering


@pytest.fixture(scope="module")
def helm() -> str:
    path = _find_helm()
    if path is None:
        pytest.fail(HELM_INSTALL_HINT, pytrace=False)
    return path


def render(helm: str, values: str, *sets: str) -> list[Doc]:
    args = [helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION]
    args += ["-f", str(CHART / "ci" / values)]
    for item in sets:
        if item.endswith(".yaml") and "=" not in item:  # another values file over the first
            args += ["-f", str(CHART / "ci" / item)]
            continue
        args += ["--set-json" if item.startswith("json:") else "--set", item.removeprefix("json:")]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return load_yaml_docs(result.stdout)


@pytest.fixture(scope="module")
def test_double(helm: str) -> list[Doc]:
    return render(helm, "test-double-values.yaml")


@pytest.fixture(scope="module")
def production(helm: str) -> list[Doc]:
    return render(helm, "production-values.yaml")


def policies(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["kind"] == "NetworkPolicy"]


def pods(docs: list[Doc]) -> dict[str, Doc]:
    """Pod templates of the release's workloads by component: Deployments and hook Jobs."""
    out: dict[str, Doc] = {}
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            template = doc["spec"]["template"]
            out[template["metadata"]["labels"][COMPONENT]] = template
    return out


def selects(selector: Doc, labels: dict[str, str]) -> bool:
    """A LabelSelector's verdict on a set of labels (matchLabels and matchExpressions)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[op]
        if not ok:
            return False
    return True


def applying(docs: list[Doc], labels: dict[str, str], kind: str) -> list[Doc]:
    """The policies isolating a pod with ``labels`` for ``kind`` (Ingress or Egress)."""
    return [
        p
        for p in policies(docs)
        if kind in p["spec"].get("policyTypes", ["Ingress"])
        and selects(p["spec"]["podSelector"], labels)
    ]


def peer_source(peer: Doc) -> str:
    """A release component a peer names, or OUTSIDE for anything broader."""
    if "podSelector" in peer and "namespaceSelector" not in peer and "ipBlock" not in peer:
        match = peer["podSelector"].get("matchLabels") or {}
        narrow = not peer["podSelector"].get("matchExpressions")
        if narrow and RELEASE_LABELS.items() <= match.items() and COMPONENT in match:
            return str(match[COMPONENT])
    return OUTSIDE


def ingress_sources(docs: list[Doc], labels: dict[str, str]) -> dict[int | None, set[str]]:
    """Port (None: every port) -> who may connect to it."""
    sources: dict[int | None, set[str]] = {}
    for policy in applying(docs, labels, "Ingress"):
        for rule in policy["spec"].get("ingress") or []:
            peers = {peer_source(p) for p in rule["from"]} if rule.get("from") else {OUTSIDE}
            ports = [p.get("port") for p in rule.get("ports") or []] or [None]
            for port in ports:
                sources.setdefault(port, set()).update(peers)
    return sources


def egress_rules(docs: list[Doc], labels: dict[str, str]) -> list[Doc]:
    return [
        rule
        for policy in applying(docs, labels, "Egress")
        for rule in policy["spec"].get("egress") or []
    ]


def _covered(address: str, block: Doc) -> bool:
    """True when ``block`` lets ``address`` through."""
    ip = ipaddress.ip_address(address)
    cidr = ipaddress.ip_network(block["cidr"])
    if ip.version != cidr.version or ip not in cidr:
        return False
    return not any(ip in ipaddress.ip_network(e) for e in block.get("except") or [])


def _range_excluded(network: str, block: Doc) -> bool:
    """True when no address of ``network`` gets through ``block``."""
    net = ipaddress.ip_network(network)
    cidr = ipaddress.ip_network(block["cidr"])
    if net.version != cidr.version or not net.overlaps(cidr):
        return True
    for excluded in block.get("except") or []:
        ex = ipaddress.ip_network(excluded)
        if ex.version == net.version and net.subnet_of(ex):  # type: ignore[arg-type]
            return True
    return False


def metadata_leaks(rules: Iterable[Doc]) -> list[str]:
    """Rules through which a metadata address is reachable on some port."""
    leaks = []
    for rule in rules:
        if not rule.get("to"):
            leaks.append(f"rule to any destination: {rule}")
            continue
        for peer in rule["to"]:
            block = peer.get("ipBlock")
            if block and any(_covered(a, block) for a in METADATA):
                leaks.append(f"{block} ports={rule.get('ports')}")
    return leaks


# --------------------------------------------------------------------------- the chart


def test_network_policies_validate_offline(
    test_double: list[Doc], production: list[Doc], helm: str
) -> None:
    """Schema-valid NetworkPolicies (kubernetes-validate, strict) in every values shape."""
    wide_open = render(
        helm,
        "test-double-values.yaml",
        "networkPolicy.monitoring.enabled=true",
        'json:networkPolicy.gatewayFrom=[{"namespaceSelector":{"matchLabels":'
        '{"kubernetes.io/metadata.name":"ingress-nginx"}}}]',
        'json:networkPolicy.kafka.to=[{"ipBlock":{"cidr":"10.20.0.0/16"}}]',
    )
    checked = 0
    for docs in (test_double, production, wide_open):
        for policy in policies(docs):
            for version in SCHEMA_VERSIONS:
                kubernetes_validate.validate(policy, version, strict=True)
            checked += 1
    assert checked >= 3 * 9


def test_every_pod_is_isolated_both_ways(test_double: list[Doc], production: list[Doc]) -> None:
    for docs in (test_double, production):
        found = pods(docs)
        expected = {*SERVICE_PORTS, PROJECTOR, "topics", "migrate"}
        assert expected <= set(found)
        for component, pod in found.items():
            labels = pod["metadata"]["labels"]
            assert applying(docs, labels, "Ingress"), f"{component}: no ingress policy"
            assert applying(docs, labels, "Egress"), f"{component}: no egress policy"


def test_only_the_gateway_is_reachable_from_outside(
    test_double: list[Doc], production: list[Doc]
) -> None:
    for docs in (test_double, production):
        for component, pod in pods(docs).items():
            sources = ingress_sources(docs, pod["metadata"]["labels"])
            outside = {port for port, peers in sources.items() if OUTSIDE in peers}
            if component == GATEWAY:
                assert outside == {SERVICE_PORTS[GATEWAY]}, sources
            else:
                assert not outside, f"{component} reachable from outside: {sources}"


def test_each_internal_port_admits_exactly_its_callers(
    test_double: list[Doc], production: list[Doc]
) -> None:
    callers = callers_from_code()
    for label, docs in (("test-double", test_double), ("production", production)):
        for component, pod in pods(docs).items():
            if component in ("topics", "migrate"):
                assert not ingress_sources(docs, pod["metadata"]["labels"]), component
                continue
            (container,) = pod["spec"]["containers"]
            port = container["ports"][0]["containerPort"]
            sources = ingress_sources(docs, pod["metadata"]["labels"])
            assert set(sources) <= {port}, f"{label}: {component} opens other ports: {sources}"
            inside = sources.get(port, set()) - {OUTSIDE}
            expected = set(callers[component])
            if component == TEST_DOUBLE and label != "test-double":
                expected = set()
            assert inside == expected, (
                f"{label}: {component} admits {inside}, calls from {expected}"
            )


def test_egress_reaches_exactly_the_callees(test_double: list[Doc], production: list[Doc]) -> None:
    """Calls the code makes are allowed out (a missing one is an outage, not a leak), and
    no release pod is reachable that the code does not call."""
    callees = callees_from_code()
    for label, docs in (("test-double", test_double), ("production", production)):
        found = pods(docs)
        for component, pod in found.items():
            allowed: set[str] = set()
            for rule in egress_rules(docs, pod["metadata"]["labels"]):
                for peer in rule.get("to") or []:
                    source = peer_source(peer)
                    if source != OUTSIDE:
                        allowed.add(source)
            expected = set(callees.get(component, set()))
            if label != "test-double":
                expected.discard(TEST_DOUBLE)
            assert allowed == expected, f"{label}: {component} may call {allowed}"


def test_every_process_reaches_its_infrastructure(test_double: list[Doc]) -> None:
    """DNS, Kafka, PostgreSQL and Redis are allowed out of every Weft process, and the
    hooks' own needs out of the jobs (also during an upgrade, under the old policies)."""
    needs = {"kafka": 9092, "postgres": 5432, "redis": 6379}
    for component, pod in pods(test_double).items():
        rules = egress_rules(test_double, pod["metadata"]["labels"])
        ports = {(p.get("protocol", "TCP"), p["port"]) for r in rules for p in r.get("ports") or []}
        assert {("UDP", 53), ("TCP", 53)} <= ports, component
        if component == TEST_DOUBLE:
            expected = set()
        elif component == "topics":
            expected = {needs["kafka"]}
        elif component == "migrate":
            expected = {needs["postgres"]}
        elif component == "engine":  # no database role: its state is in Redis
            expected = {needs["kafka"], needs["redis"]}
            assert ("TCP", needs["postgres"]) not in ports, f"{component}: {ports}"
        else:
            expected = set(needs.values())
        assert {("TCP", port) for port in expected} <= ports, f"{component}: {ports}"
        if component == TEST_DOUBLE:
            assert not {("TCP", port) for port in needs.values()} & ports, component


def test_tool_workers_never_reach_metadata_or_private_ranges(
    test_double: list[Doc], production: list[Doc]
) -> None:
    for docs in (test_double, production):
        found = pods(docs)
        for component, pod in found.items():
            rules = egress_rules(docs, pod["metadata"]["labels"])
            assert not metadata_leaks(rules), f"{component}: {metadata_leaks(rules)}"
        for worker in TOOL_WORKERS:
            rules = egress_rules(docs, found[worker]["metadata"]["labels"])
            any_port = [r for r in rules if not r.get("ports")]
            assert any_port, f"{worker}: no internet egress for its tools"
            for rule in any_port:
                for peer in rule["to"]:
                    block = peer.get("ipBlock")
                    assert block, f"{worker}: any-port egress to a selector {peer}"
                    open_ranges = [r for r in PRIVATE_RANGES if not _range_excluded(r, block)]
                    assert not open_ranges, f"{worker}: {block} lets {open_ranges} through"
            # Reaches the internet at all: a public address of each family.
            for public in ("93.184.216.34", "2606:2800:220:1::1"):
                assert any(_covered(public, p["ipBlock"]) for r in any_port for p in r["to"]), (
                    public
                )


def _named_peers(values_files: tuple[str, ...], worker: str) -> list[Doc]:
    """The peers an operator named for ``worker`` in the values: where the infrastructure
    is, the DNS servers, the API server (sandbox) and extraEgress."""
    merged: Doc = load_yaml((CHART / "values.yaml").read_text())
    for name in values_files:
        merged = _merge(merged, load_yaml((CHART / "ci" / name).read_text()))
    np = merged["networkPolicy"]
    named = [p for kind in ("kafka", "postgres", "redis", "llm", "tracing") for p in np[kind]["to"]]
    named += np["dns"]["to"] + merged["sandbox"]["kubernetes"]["apiServer"]["to"]
    named += [p for rule in np["extraEgress"].get(worker, []) for p in rule.get("to", [])]
    return named


def _merge(base: Doc, over: Doc) -> Doc:
    out = dict(base)
    for key, value in over.items():
        nested = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merge(out[key], value) if nested else value
    return out


def private_leaks(rules: Iterable[Doc], named: list[Doc]) -> list[str]:
    """Peers through which some private address is reachable (on any port of the rule)
    that the operator did not name: a selector of pods beyond the release's own
    components, or an ipBlock that lets part of a private range through."""
    leaks = []
    for rule in rules:
        if not rule.get("to"):
            leaks.append(f"rule to any destination: {rule}")
            continue
        for peer in rule["to"]:
            if peer in named or peer_source(peer) != OUTSIDE:
                continue
            block = peer.get("ipBlock")
            if block is None:
                leaks.append(f"unnamed selector {peer} ports={rule.get('ports')}")
                continue
            open_ranges = [r for r in PRIVATE_RANGES if not _range_excluded(r, block)]
            if open_ranges:
                leaks.append(f"{block} ports={rule.get('ports')} lets {open_ranges} through")
    return leaks


@pytest.mark.parametrize(
    "values_files",
    [("test-double-values.yaml",), ("production-values.yaml",),
     ("test-double-values.yaml", "everything-values.yaml")],
)  # fmt: skip
def test_tool_workers_reach_no_private_address_on_any_port_unless_named(
    helm: str, values_files: tuple[str, ...]
) -> None:
    """Not only their internet rule: the infrastructure, LLM and API-server rules of a tool
    worker name where those are, so a model-driven fetch reaches no other private address
    on 443, 5432, 6379 or 9092 either."""
    docs = render(helm, *values_files)
    found = pods(docs)
    for worker in TOOL_WORKERS:
        rules = egress_rules(docs, found[worker]["metadata"]["labels"])
        leaks = private_leaks(rules, _named_peers(values_files, worker))
        assert not leaks, f"{values_files}: {worker}: " + "\n".join(leaks)


def test_a_tool_worker_without_named_infrastructure_is_refused(helm: str) -> None:
    """Fail closed: no default 'any address' peer for a tool worker's infrastructure."""
    settings = (
        "networkPolicy.kafka.to=[]",
        "networkPolicy.redis.to=[]",
        "networkPolicy.postgres.to=[]",
        "sandbox.kubernetes.apiServer.to=[]",
    )
    for setting in settings:
        args = [helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION]
        args += ["-f", str(CHART / "ci" / "test-double-values.yaml"), "--set-json", setting]
        result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode != 0, setting
        assert "is required" in result.stderr and "tool worker" in result.stderr, result.stderr
    # Without tool workers the other services keep the documented broad default.
    docs = render(helm, "test-double-values.yaml", "json:networkPolicy.kafka.to=[]",
                  "json:networkPolicy.toolWorkers.services=[]")  # fmt: skip
    memory = egress_rules(docs, pods(docs)["memory"]["metadata"]["labels"])
    assert any({"namespaceSelector": {}} in (r.get("to") or []) for r in memory)


def test_egress_ports_follow_the_connection_values(helm: str) -> None:
    """Kafka, PostgreSQL, Redis and LLM ports come from their addresses; a wrong one would
    silently cut a service off its infrastructure."""
    docs = render(
        helm,
        "test-double-values.yaml",
        "kafka.bootstrap=k-0.kafka:9093\\,k-1.kafka:9094\\,k-2.kafka:9093",
        "postgres.url=postgresql+asyncpg://weft:pw@pg.db:5433/weft",
        "redis.url=redis://redis.cache:6380/0",
        "services.scripted-llm.enabled=false",
        "llm.baseUrl=https://llm.example.com/v1",
        "llm.model=m",
        "llm.apiKey=k",
    )

    def ports_of(component: str) -> set[int]:
        labels = pods(docs)[component]["metadata"]["labels"]
        rules = egress_rules(docs, labels)
        return {p["port"] for r in rules for p in r.get("ports") or [] if r.get("to")}

    engine, memory = ports_of("engine"), ports_of("memory")
    assert {9093, 9094, 6380, 443} <= engine, engine
    assert not {9092, 5432, 6379, 5433} & engine, engine  # the engine opens no database
    assert 5433 in memory and 5432 not in memory, memory


def test_monitoring_and_gateway_sources_are_configurable(helm: str) -> None:
    """Switched on, the monitoring namespace is the only extra source of each port, and
    the gateway admits only the configured peers."""
    ingress = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress"}}}
    monitoring = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {},
    }
    docs = render(
        helm,
        "test-double-values.yaml",
        "networkPolicy.monitoring.enabled=true",
        'json:networkPolicy.gatewayFrom=[{"namespaceSelector":{"matchLabels":'
        '{"kubernetes.io/metadata.name":"ingress"}}}]',
    )
    for component, pod in pods(docs).items():
        labels = pod["metadata"]["labels"]
        rules = [
            rule
            for policy in applying(docs, labels, "Ingress")
            for rule in policy["spec"].get("ingress") or []
        ]
        if component in ("topics", "migrate"):
            assert not rules
            continue
        assert all(r.get("from") for r in rules), f"{component}: a rule open to every source"
        outside = [p for r in rules for p in r["from"] if peer_source(p) == OUTSIDE]
        expected = [monitoring, ingress] if component == GATEWAY else [monitoring]
        assert sorted(map(str, outside)) == sorted(map(str, expected)), f"{component}: {outside}"

    assert not policies(render(helm, "test-double-values.yaml", "networkPolicy.enabled=false"))


# --------------------------------------------------------------------------- docker compose


def _published(entry: Any) -> tuple[str, str]:
    """(host address, host port) of a compose `ports` entry; address "" = every interface."""
    if isinstance(entry, dict):
        return str(entry.get("host_ip", "")), str(entry.get("published", ""))
    text = re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?-([^}]*)\}", r"\1", str(entry))
    text = text.split("/", 1)[0]
    parts = text.rsplit(":", 2)
    if len(parts) == 3:
        return parts[0].strip("[]"), parts[1]
    if len(parts) == 2:
        return "", parts[0]
    return "", parts[0]  # container port only: published on an ephemeral host port


def test_compose_publishes_no_internal_port_on_the_host() -> None:
    """Only the gateway is published; internal services, the projector, the LLM test
    double and the infrastructure are reachable on the compose network only."""
    services = load_yaml(COMPOSE_FILE.read_text())["services"]
    for name, service in services.items():
        assert service.get("network_mode") != "host", f"{name} shares the host's network"
        for entry in service.get("ports") or []:
            host, _ = _published(entry)
            if name != GATEWAY:
                assert host in ("127.0.0.1", "::1"), f"{name} publishes {entry} beyond loopback"
    assert services[GATEWAY].get("ports"), "the gateway must be published"
    for entry in services[GATEWAY]["ports"]:
        _, port = _published(entry)
        assert port, entry


def test_compose_gives_each_caller_its_callees_urls() -> None:
    """In compose every service reaches every other on the network, so the only thing to
    get right is that each caller is told where its callees are."""
    services = load_yaml(COMPOSE_FILE.read_text())["services"]
    for caller, callees in callees_from_code().items():
        if caller not in SERVICE_PORTS:
            continue
        env = services[caller]["environment"]
        for callee in callees - {TEST_DOUBLE}:
            var = f"WEFT_{callee.upper().replace('-', '_')}_URL"
            assert env.get(var) == f"http://{callee}:{SERVICE_PORTS[callee]}", (caller, var)


def test_metrics_port_admits_only_the_monitoring_peers(helm: str) -> None:
    """Each Weft pod's metrics port: closed to every source by default, and with
    networkPolicy.monitoring on, open to the monitoring peers alone (never to a caller of
    the service's API, nor to the gateway's public sources)."""
    monitoring = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {},
    }
    for enabled in (False, True):
        switch = "true" if enabled else "false"
        docs = render(helm, "test-double-values.yaml", f"networkPolicy.monitoring.enabled={switch}")
        checked = set()
        for component, pod in pods(docs).items():
            (container,) = pod["spec"]["containers"]
            port = next((p["containerPort"] for p in container.get("ports", [])
                         if p["name"] == "metrics"), None)  # fmt: skip
            if port is None:
                continue
            checked.add(component)
            admitting = [
                rule
                for policy in applying(docs, pod["metadata"]["labels"], "Ingress")
                for rule in policy["spec"].get("ingress") or []
                if not rule.get("ports") or any(p["port"] == port for p in rule["ports"])
            ]
            if not enabled:
                assert not admitting, f"{component}: metrics port open: {admitting}"
            else:
                assert admitting, f"{component}: Prometheus cannot scrape"
                assert all(r.get("from") == [monitoring] for r in admitting), component
        # Every Weft process has a metrics port: the services, the projector, the workers.
        assert checked == {*PROCESS_SETTINGS, PROJECTOR}, checked
