"""sandbox settings (environment, prefix ``WEFT_``): the backend and its limits (SPEC S-05)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from weft_platform.settings import ServiceSettings

MIB = 1024 * 1024


class SandboxSettings(ServiceSettings):
    """sandbox settings."""

    service_name: str = "sandbox"
    http_port: int = 8084
    memory_url: str = Field(
        default="http://127.0.0.1:8085",
        description="memory's internal API: whether a session named by a files request is "
        "the caller's (memory owns sessions).",
    )
    agent_config_url: str = Field(
        default="http://127.0.0.1:8081",
        description="agent-config's internal API: skill packages (agent-config owns them).",
    )
    internal_timeout_s: float = Field(default=10.0, gt=0, le=120)
    sandbox_backend: Literal["local", "kubernetes", "none"] = Field(
        default="local",
        description="local: bubblewrap processes on this host; kubernetes: one pod per "
        "session (weft_sandbox.k8s_backend, sandbox_k8s_*); none: no sandbox is "
        "configured, script tools answer that they cannot run (S-05).",
    )
    sandbox_root: str = Field(
        default="",
        description="Where local workspaces live; empty: $WEFT_HOME/sandbox/<instance id>.",
    )
    sandbox_concurrency: int = Field(
        default=4, ge=1, le=64, description="Calls one replica runs at once (its runner tasks)."
    )
    # Fair shares of the sandbox between tenants (docs/fairness.md, "Sandbox calls"): named
    # as tool-exec's WEFT_TOOL_* settings.
    sandbox_tenant_max_inflight: int = Field(
        default=3,
        ge=1,
        description="Sandbox calls one tenant runs at once across every replica (Redis leases).",
    )
    sandbox_tenant_max_local: int | None = Field(
        default=None,
        ge=0,
        description="Runners of one replica a single tenant may hold at once; unset: all but "
        "one (sandbox_concurrency - 1, at least 1); 0: no limit per replica.",
    )
    sandbox_slot_lease_s: float = Field(
        default=30.0,
        gt=1,
        description="A tenant slot's lease, renewed while its call runs: a killed "
        "replica's slots come back after at most this long.",
    )
    sandbox_read_ahead: int = Field(
        default=256,
        ge=1,
        description="Calls whose bodies a replica holds read ahead of its commit points "
        "(all partitions); past it the newest of the biggest backlog are parked.",
    )
    sandbox_partition_read_ahead: int = Field(
        default=64, ge=1, description="The same bound for one partition."
    )
    sandbox_partition_window: int = Field(
        default=4096,
        ge=1,
        description="Calls of one partition read and not committed past, parked ones "
        "included; at this many the partition pauses.",
    )
    sandbox_workspace_bytes: int = Field(
        default=256 * MIB, ge=MIB, description="Size cap of one session's workspace."
    )
    sandbox_tenant_bytes: int = Field(
        default=2048 * MIB,
        ge=MIB,
        description="What one tenant's live workspaces may hold in all, across replicas "
        "(idle ones are evicted first, least recently used; then a call is refused).",
    )
    sandbox_replica_bytes: int = Field(
        default=8192 * MIB,
        ge=MIB,
        description="What the live workspaces of one replica may hold in all (tmpfs: host "
        "memory; size it against the host's RAM).",
    )
    sandbox_cpu_seconds: int = Field(default=300, ge=1, description="RLIMIT_CPU per command.")
    sandbox_memory_bytes: int = Field(
        default=1024 * MIB, ge=16 * MIB, description="RLIMIT_AS per process of a command."
    )
    sandbox_file_bytes: int = Field(
        default=128 * MIB, ge=MIB, description="RLIMIT_FSIZE: largest file a command writes."
    )
    sandbox_nofile: int = Field(default=256, ge=16, description="RLIMIT_NOFILE per process.")
    sandbox_pids: int = Field(default=128, ge=8, description="Processes of one sandbox at once.")
    sandbox_network: bool = Field(
        default=False, description="Give commands the host's network (off: no network)."
    )
    sandbox_kill_grace_s: float = Field(
        default=2.0, gt=0, description="SIGTERM to SIGKILL on a command's timeout."
    )
    sandbox_idle_ttl_s: float = Field(
        default=1800.0, gt=0, description="A workspace unused this long is dropped locally."
    )
    sandbox_reap_interval_s: float = Field(default=30.0, gt=0)
    sandbox_attachment_bytes: int = Field(
        default=64 * MIB,
        ge=1,
        description="Largest attachment the files API takes (the "
        "gateway's WEFT_ATTACHMENT_MAX_BYTES is the limit callers see).",
    )
    sandbox_files_wait_s: float = Field(
        default=30.0,
        gt=0,
        description="How long an upload, listing or download waits for "
        "the session's running call before answering 409.",
    )
    sandbox_cgroup_root: str = Field(
        default="/sys/fs/cgroup/pids",
        description="cgroup (v1 pids controller or v2) under which each sandbox gets its "
        "own group for the PID limit; unwritable: RLIMIT_NPROC on a per-sandbox uid.",
    )
    sandbox_uid_base: int = Field(
        default=200_000,
        ge=1000,
        description="When the service runs as root, commands run as base + a per-session "
        "offset (never as root).",
    )
    sandbox_k8s_namespace: str = Field(
        default="",
        description="Namespace of the session pods; empty: the service's own (in-cluster), "
        "else the kubeconfig context's, else default.",
    )
    sandbox_k8s_kubeconfig: str = Field(
        default="", description="A kubeconfig file; empty: the in-cluster service account."
    )
    sandbox_k8s_image: str = Field(
        default="docker.io/library/python:3.11-slim",
        description="Image of the session pods: needs sh, GNU tar, head, kill and sleep.",
    )
    sandbox_k8s_cpu: str = Field(default="1", description="CPU limit of a session pod.")
    sandbox_k8s_uid: int = Field(
        default=10001, ge=1, description="The non-root uid and gid commands run as in a pod."
    )
    sandbox_k8s_runtime_class: str = Field(
        default="", description="runtimeClassName of the session pods (e.g. gvisor); empty: none."
    )
    sandbox_k8s_start_timeout_s: float = Field(
        default=120.0, gt=0, description="How long a new session pod may take to run."
    )
