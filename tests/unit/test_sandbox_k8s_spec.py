"""The Kubernetes sandbox backend's session pod, checked offline against the Kubernetes
schemas (kubernetes-validate) and for what isolates it (SPEC S-01, S-05); the chart's Role
and NetworkPolicy are checked in test_deploy_manifests.py."""

from __future__ import annotations

import kubernetes_validate
import pytest
from weft_sandbox.k8s_pod import LABELS, ROLE_LABEL, pod_name, session_pod
from weft_sandbox.settings import MIB, SandboxSettings

SCHEMA_VERSIONS = ("1.27.0", "1.37.0")


def _pod(**overrides: object) -> dict[str, object]:
    settings = SandboxSettings(sandbox_backend="kubernetes", **overrides)  # type: ignore[arg-type]
    return session_pod(settings, pod_name("tenant-a", "session-1"), now=1000.0)


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("runtime_class", ["", "gvisor"])
def test_the_session_pod_matches_the_kubernetes_schema(version: str, runtime_class: str) -> None:
    kubernetes_validate.validate(
        _pod(sandbox_k8s_runtime_class=runtime_class), version, strict=True
    )


def test_the_session_pod_is_locked_down() -> None:  # SPEC S-05
    pod = _pod(sandbox_workspace_bytes=64 * MIB, sandbox_k8s_uid=4242)
    spec = pod["spec"]
    assert isinstance(spec, dict)
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert "runtimeClassName" not in spec
    assert spec["securityContext"]["runAsNonRoot"] is True
    for container in spec["containers"]:
        security = container["securityContext"]
        assert security == {
            "runAsNonRoot": True, "runAsUser": 4242, "runAsGroup": 4242,
            "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
            "privileged": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }  # fmt: skip
        assert set(container["resources"]["limits"]) >= {"cpu", "memory"}
    sandbox, files = spec["containers"]
    mounts = {m["mountPath"]: m for m in sandbox["volumeMounts"]}
    assert mounts["/workspace/input"]["readOnly"] is True  # attachments
    assert mounts["/workspace/input"]["subPath"] == "input"
    assert "readOnly" not in mounts["/workspace"] and "/tmp" in mounts
    assert [m["mountPath"] for m in files["volumeMounts"]] == ["/workspace"]
    assert spec["volumes"] == [
        {"name": "workspace", "emptyDir": {"sizeLimit": str(64 * MIB)}},
        {"name": "tmp", "emptyDir": {"sizeLimit": str(64 * MIB)}},
    ]
    metadata = pod["metadata"]
    assert isinstance(metadata, dict)
    assert metadata["labels"] == LABELS and LABELS[ROLE_LABEL] == "true"


def test_pod_names_are_per_tenant_and_session_dns_labels() -> None:  # SPEC S-01
    name = pod_name("tenant-a", "session-1")
    assert name == pod_name("tenant-a", "session-1")  # every replica derives the same
    assert name != pod_name("tenant-b", "session-1")  # another tenant's id: another pod
    assert name != pod_name("tenant-a\x00session", "-1")
    assert len(name) <= 63 and name.replace("-", "").isalnum() and name.islower()
