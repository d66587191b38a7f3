"""The chart's admission policies on the sandbox's session pods
(helm/weft/templates/sandbox-admission.yaml), evaluated OFFLINE: the chart is rendered with
`helm template`, each policy's CEL (matchConditions and validations) is run by cel-python
against what the API server would receive from the Kubernetes backend, built by the
backend's own code (weft_sandbox.k8s_pod) with the settings the chart gives the sandbox
Deployment. The backend's pod and execs are admitted; a pod that mounts a Secret or a
service-account token, turns the token on, uses a hostPath, runs another image or lacks the
session labels (and the other escapes the policy names) is refused. No cluster has run
these policies: a Kubernetes API server could still differ from cel-python (it types
``object`` by the OpenAPI schema), which is why the expressions keep to standard CEL.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from weft_sandbox.k8s_pod import COMMAND_CONTAINER, FILES_CONTAINER, pod_name, session_pod
from weft_sandbox.settings import SandboxSettings

from tests.k8s_admission import SANDBOX_USER, SandboxAdmission
from tests.unit.test_deploy_manifests import CHART, _render
from tests.unit.test_deploy_manifests import helm as helm  # the fixture: helm, or a clear failure

Pod = dict[str, Any]


class Rendered:
    """The chart rendered with some values: its sandbox policies and the settings its
    sandbox Deployment runs the backend with."""

    def __init__(self, docs: list[dict[str, Any]]):
        by_kind = {(d["kind"], d["metadata"]["name"]): d for d in docs}
        deployment = by_kind[("Deployment", "weft-sandbox")]
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        self.namespace = env["WEFT_SANDBOX_K8S_NAMESPACE"]
        self.settings = SandboxSettings(
            sandbox_backend="kubernetes",
            sandbox_k8s_namespace=self.namespace,
            sandbox_k8s_image=env["WEFT_SANDBOX_K8S_IMAGE"],
            sandbox_k8s_cpu=env["WEFT_SANDBOX_K8S_CPU"],
            sandbox_k8s_uid=int(env["WEFT_SANDBOX_K8S_UID"]),
            sandbox_k8s_runtime_class=env["WEFT_SANDBOX_K8S_RUNTIME_CLASS"],
        )
        self.admission = SandboxAdmission(docs, self.namespace)
        self.pods, self.exec = self.admission.pods, self.admission.exec
        self.bindings = {name: d for (kind, name), d in by_kind.items()
                         if kind == "ValidatingAdmissionPolicyBinding"}  # fmt: skip

    def backend_pod(self) -> Pod:
        """The session pod as the backend sends it: its manifest through the client's own
        serialisation (what ``create_namespaced_pod`` puts on the wire), as JSON."""
        body = session_pod(self.settings, pod_name("tenant-a", "session-1"), now=1000.0)
        wire = client.ApiClient().sanitize_for_serialization(body)  # type: ignore[no-untyped-call]
        return json.loads(json.dumps(wire))  # type: ignore[no-any-return]

    def pod_refusals(self, pod: Pod, operation: str = "CREATE") -> list[str]:
        return self.admission.pod(pod, operation)

    def exec_refusals(
        self, pod: str, container: str | None, subresource: str = "exec"
    ) -> list[str]:
        return self.admission.connect(pod, container, subresource)


@pytest.fixture(scope="module", params=["default", "production"])
def rendered(request: pytest.FixtureRequest, helm: str) -> Rendered:
    """The chart's defaults (the test-double values set no sandbox value) and production
    values (their own namespace, runtimeClassName gvisor)."""
    values = {"default": "test-double-values.yaml", "production": "production-values.yaml"}
    return Rendered(_render(helm, "-f", str(CHART / "ci" / values[request.param])))


def test_the_backends_pod_and_its_updates_are_admitted(rendered: Rendered) -> None:
    pod = rendered.backend_pod()
    assert rendered.pod_refusals(pod) == []
    # What the API server has added by the time it validates (ServiceAccount admission, the
    # scheduler's binding on later updates), and the backend's annotation patches.
    pod["spec"]["serviceAccountName"] = "default"
    pod["metadata"]["annotations"]["weft.dev/last-used"] = "2000.000"
    assert rendered.pod_refusals(pod) == []
    pod["spec"]["nodeName"] = "node-1"
    assert rendered.pod_refusals(pod, "UPDATE") == []


def _secret_volume(pod: Pod) -> None:
    pod["spec"]["volumes"].append({"name": "stolen", "secret": {"secretName": "weft-secrets"}})
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "stolen", "mountPath": "/s"})


def _projected_token(pod: Pod) -> None:
    pod["spec"]["volumes"].append({"name": "token", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}})  # fmt: skip


def _automount(pod: Pod) -> None:
    pod["spec"]["automountServiceAccountToken"] = True


def _other_account(pod: Pod) -> None:
    pod["spec"]["serviceAccountName"] = "weft-sandbox"


def _host_path(pod: Pod) -> None:
    pod["spec"]["volumes"][0] = {"name": "workspace", "hostPath": {"path": "/"}}


def _other_image(pod: Pod) -> None:
    pod["spec"]["containers"][1]["image"] = "docker.io/library/alpine:3"


def _init_container(pod: Pod) -> None:
    pod["spec"]["initContainers"] = [dict(pod["spec"]["containers"][0], name="init")]


def _no_session_label(pod: Pod) -> None:
    del pod["metadata"]["labels"]["weft.dev/sandbox-session"]


def _no_labels(pod: Pod) -> None:
    del pod["metadata"]["labels"]


def _other_name(pod: Pod) -> None:
    pod["metadata"]["name"] = "gateway-debug"


def _host_network(pod: Pod) -> None:
    pod["spec"]["hostNetwork"] = True


def _host_pid(pod: Pod) -> None:
    pod["spec"]["hostPID"] = True


def _host_ipc(pod: Pod) -> None:
    pod["spec"]["hostIPC"] = True


def _node_name(pod: Pod) -> None:
    pod["spec"]["nodeName"] = "control-plane-1"


def _privileged(pod: Pod) -> None:
    pod["spec"]["containers"][0]["securityContext"]["privileged"] = True


def _escalation(pod: Pod) -> None:
    pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True


def _capability(pod: Pod) -> None:
    pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]


def _host_port(pod: Pod) -> None:
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]


def _secret_env(pod: Pod) -> None:
    pod["spec"]["containers"][0]["env"].append({"name": "K", "valueFrom": {
        "secretKeyRef": {"name": "weft-secrets", "key": "OPENAI_API_KEY"}}})  # fmt: skip


def _env_from(pod: Pod) -> None:
    pod["spec"]["containers"][0]["envFrom"] = [{"secretRef": {"name": "weft-secrets"}}]


def _runtime_class(pod: Pod) -> None:
    pod["spec"]["runtimeClassName"] = "runc-unconfined"


MUTATIONS: dict[str, tuple[Callable[[Pod], None], str]] = {
    # the escapes the issue names
    "mounts a Secret": (_secret_volume, "emptyDir volumes only"),
    "mounts a projected service-account token": (_projected_token, "emptyDir volumes only"),
    "turns the token on": (_automount, "no service-account token"),
    "uses a hostPath": (_host_path, "emptyDir volumes only"),
    "runs another image": (_other_image, "only the sandbox image"),
    "lacks the session label": (_no_session_label, "session labels"),
    "has no labels": (_no_labels, "session labels"),
    # the rest the policy pins
    "runs as another service account": (_other_account, "no service-account token"),
    "adds an init container": (_init_container, "only the sandbox image"),
    "is not named as a session pod": (_other_name, "session labels"),
    "shares the host network": (_host_network, "no host namespace"),
    "shares the host PID namespace": (_host_pid, "no host namespace"),
    "shares the host IPC namespace": (_host_ipc, "no host namespace"),
    "picks its node": (_node_name, "placed by the scheduler"),
    "is privileged": (_privileged, "not privileged"),
    "may escalate": (_escalation, "cannot escalate"),
    "adds a capability": (_capability, "adds no capability"),
    "binds a host port": (_host_port, "no host port"),
    "reads a Secret into its environment": (_secret_env, "no environment from a Secret"),
    "takes a whole Secret as environment": (_env_from, "no environment from a Secret"),
    "picks another runtime class": (_runtime_class, "configured runtime class"),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_pod_the_backend_does_not_make_is_refused(rendered: Rendered, mutation: str) -> None:
    mutate, refusal = MUTATIONS[mutation]
    pod = copy.deepcopy(rendered.backend_pod())
    mutate(pod)
    for operation in ("CREATE", "UPDATE"):
        if mutation == "picks its node" and operation == "UPDATE":
            continue  # a bound pod has its node: only a create may not choose it
        refused = rendered.pod_refusals(pod, operation)
        assert any(refusal in message for message in refused), (operation, refused)


def test_the_runtime_class_is_pinned_to_the_configured_one(rendered: Rendered) -> None:
    pod = rendered.backend_pod()
    configured = rendered.settings.sandbox_k8s_runtime_class
    assert pod["spec"].get("runtimeClassName", "") == configured
    pod["spec"].pop("runtimeClassName", None)
    assert (rendered.pod_refusals(pod) == []) is (configured == "")  # dropping gVisor: refused


def test_execs_reach_only_the_session_pods_containers(rendered: Rendered) -> None:
    name = pod_name("tenant-a", "session-1")
    for container in (COMMAND_CONTAINER, FILES_CONTAINER):  # what k8s_backend execs into
        assert rendered.exec_refusals(name, container) == []
    assert rendered.exec_refusals("postgres-0", COMMAND_CONTAINER)  # not a session pod
    assert rendered.exec_refusals(name, "istio-proxy")  # another container
    assert rendered.exec_refusals(name, None)  # the pod's default container, unnamed
    assert rendered.exec_refusals(name, COMMAND_CONTAINER, subresource="attach")
    assert rendered.exec_refusals(name, COMMAND_CONTAINER, subresource="portforward")


def test_the_policies_bind_to_the_sandbox_namespace_and_service_account(
    rendered: Rendered,
) -> None:
    for policy in (rendered.pods, rendered.exec):
        assert policy.matches_user(SANDBOX_USER)
        assert not policy.matches_user("system:serviceaccount:default:weft-gateway")
        assert not policy.matches_user("kubernetes-admin")
        binding = rendered.bindings[policy.name]["spec"]
        assert binding["policyName"] == policy.name
        assert binding["validationActions"] == ["Deny"]
        assert binding["matchResources"]["namespaceSelector"] == {
            "matchLabels": {"kubernetes.io/metadata.name": rendered.namespace}
        }
    assert [r["operations"] for r in rendered.pods.rules] == [["CREATE", "UPDATE"]]
    assert [r["operations"] for r in rendered.exec.rules] == [["CONNECT"]]
