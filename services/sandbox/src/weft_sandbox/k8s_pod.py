"""The Pod of one session's sandbox on Kubernetes (SPEC S-01, S-05), as a manifest.

The name derives from the workspace key (tenant, session), so every replica finds a
session's pod by name. Two containers share one ``emptyDir`` holding ``/workspace``:

- ``sandbox`` runs the commands: ``/workspace`` writable, ``/workspace/input`` mounted
  read-only over it (a subPath of the same volume), ``/tmp`` an ``emptyDir`` of its own;
- ``files`` only moves the workspace in and out (tar over exec), with ``input`` writable.

Both run as a fixed non-root uid with a read-only root filesystem, no privilege
escalation, every capability dropped, the runtime's default seccomp profile and no
service-account token. The labels select the pod into the chart's NetworkPolicy that
denies all ingress and egress.
"""

from __future__ import annotations

from typing import Any

from weft_sandbox.local_backend import TMP_BYTES
from weft_sandbox.settings import MIB, SandboxSettings
from weft_sandbox.workspace import INPUT, WORKSPACE, workspace_key

POD_PREFIX = "weft-sandbox-"
COMMAND_CONTAINER = "sandbox"
FILES_CONTAINER = "files"

ROLE_LABEL = "weft.dev/sandbox-session"
"""Selects the session pods: the reaper's label selector and the deny-all NetworkPolicy."""
LABELS = {
    "app.kubernetes.io/name": "weft-sandbox-session",
    "app.kubernetes.io/managed-by": "weft-sandbox",
    ROLE_LABEL: "true",
}
SELECTOR = f"{ROLE_LABEL}=true"
LAST_USED = "weft.dev/last-used"
"""Annotation: epoch seconds of the pod's last use (idle TTL, S-05, from any replica)."""
SYNCED = "weft.dev/workspace-digest"
"""Annotation: digest of the replica copy the pod's workspace last matched."""

# pid 1 of a container ignores signals it has no handler for, so ``kill -KILL -1`` on a
# timeout stops every command process but this loop; ``wait`` reaps the orphans it adopts.
IDLE_LOOP = 'trap "exit 0" TERM; while :; do sleep 3600 & wait; done'
REQUESTS = {"cpu": "100m", "memory": str(128 * MIB)}
"""What a pod reserves on its node (an idle session uses little; the limits cap it)."""
STORAGE_SLACK = 64 * MIB
"""Ephemeral storage beyond the two emptyDirs (container logs, writable layers)."""


def pod_name(tenant_id: str, session_id: str) -> str:
    """The session's pod name (45 characters, a valid DNS label)."""
    return POD_PREFIX + workspace_key(tenant_id, session_id)


def session_pod(settings: SandboxSettings, name: str, *, now: float) -> dict[str, Any]:
    """The manifest of the session pod ``name``."""
    uid = settings.sandbox_k8s_uid
    storage = settings.sandbox_workspace_bytes + TMP_BYTES + STORAGE_SLACK
    limits = {
        "cpu": settings.sandbox_k8s_cpu,
        "memory": str(settings.sandbox_memory_bytes),
        "ephemeral-storage": str(storage),
    }
    security = {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    workspace = {"name": "workspace", "mountPath": WORKSPACE}
    containers = [
        {
            "name": COMMAND_CONTAINER,
            "image": settings.sandbox_k8s_image,
            "command": ["/bin/sh", "-c", IDLE_LOOP],
            "workingDir": WORKSPACE,
            "env": [{"name": "HOME", "value": WORKSPACE}, {"name": "TMPDIR", "value": "/tmp"}],
            "resources": {"limits": limits, "requests": REQUESTS},
            "securityContext": security,
            "volumeMounts": [
                workspace,
                {
                    "name": "workspace",
                    "mountPath": f"{WORKSPACE}/{INPUT}",
                    "subPath": INPUT,
                    "readOnly": True,
                },
                {"name": "tmp", "mountPath": "/tmp"},
            ],
        },
        {
            "name": FILES_CONTAINER,
            "image": settings.sandbox_k8s_image,
            "command": ["/bin/sh", "-c", IDLE_LOOP],
            "resources": {"limits": {"cpu": "250m", "memory": str(128 * MIB)}},
            "securityContext": security,
            "volumeMounts": [workspace],
        },
    ]
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 5,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": uid,
            "runAsGroup": uid,
            "fsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": containers,
        "volumes": [
            {"name": "workspace", "emptyDir": {"sizeLimit": str(settings.sandbox_workspace_bytes)}},
            {"name": "tmp", "emptyDir": {"sizeLimit": str(TMP_BYTES)}},
        ],
    }
    if settings.sandbox_k8s_runtime_class:
        spec["runtimeClassName"] = settings.sandbox_k8s_runtime_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": dict(LABELS),
            "annotations": {LAST_USED: f"{now:.3f}", SYNCED: ""},
        },
        "spec": spec,
    }
