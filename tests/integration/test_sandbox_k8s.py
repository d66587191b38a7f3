"""The Kubernetes sandbox backend against a local fake of the API server (tests/k8s_fake.py):
one pod per session with the hardened spec, commands through the exec websocket with the
local backend's contract (exit code, caps, stdin, timeout), the workspace carried in and out
by tar over exec, a second replica finding the same pod by name, idle pods reaped from any
replica (SPEC S-01, S-02, S-05, T-15). No real cluster: this is the client's side only."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import ToolCallRequested, ToolCallRequestedData, ToolContext, Topic
from weft_platform.web_snapshots import MemorySnapshotStore
from weft_sandbox.checkpoints import CheckpointStore, GitCheckpoints
from weft_sandbox.k8s_backend import KubernetesBackend, PodUnavailable
from weft_sandbox.k8s_pod import LAST_USED, pod_name
from weft_sandbox.local_backend import Command
from weft_sandbox.settings import MIB, SandboxSettings
from weft_sandbox.skills import SkillLibrary
from weft_sandbox.tools import sandbox_registry
from weft_sandbox.worker import SandboxHost, SandboxWorker
from weft_sandbox.workspace import Workspace, WorkspacePool

from tests.integration.sandbox_kit import TOOLS, StoreSkills
from tests.k8s_admission import SandboxAdmission
from tests.k8s_fake import FakeApiServer, usable
from tests.unit.test_deploy_manifests import CHART, HELM_INSTALL_HINT, _find_helm, _render

pytestmark = pytest.mark.skipif(usable() is not None, reason=str(usable()))

NAMESPACE = "weft-test"


@pytest.fixture(scope="module")
def admission() -> SandboxAdmission:
    """The Helm chart's admission policies for the default values (the image and runtime
    class these tests' settings keep), which the fake applies to every pod and exec."""
    helm = _find_helm()
    if helm is None:
        pytest.fail(HELM_INSTALL_HINT, pytrace=False)
    docs = _render(helm, "-f", str(CHART / "ci" / "test-double-values.yaml"))
    return SandboxAdmission(docs, "weft-sandboxes")


@pytest.fixture
async def fake(admission: SandboxAdmission) -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer(admission=admission) as server:
        yield server


@dataclass
class Replica:
    """One sandbox replica: its backend and its own copies of the workspaces."""

    backend: KubernetesBackend
    pool: WorkspacePool

    def space(self, tenant: str, session: str) -> Workspace:
        return self.pool.get(tenant, session) or self.pool.create(tenant, session)


@pytest.fixture
def roots() -> Iterator[list[WorkspacePool]]:
    """The replicas' pools: closed (their tmpfs copies unmounted) and removed after."""
    made: list[WorkspacePool] = []
    yield made
    for pool in made:
        pool.close()
        shutil.rmtree(pool.root, ignore_errors=True)


def settings(fake: FakeApiServer, tmp: Path, **overrides: Any) -> SandboxSettings:
    values: dict[str, Any] = {
        "sandbox_backend": "kubernetes", "sandbox_k8s_kubeconfig": str(
            fake.kubeconfig(tmp / f"kubeconfig-{secrets.token_hex(3)}", NAMESPACE)),
        "sandbox_workspace_bytes": 4 * MIB, "sandbox_memory_bytes": 512 * MIB,
        "sandbox_k8s_cpu": "500m", "sandbox_k8s_uid": 10001, "sandbox_kill_grace_s": 0.5,
        "sandbox_k8s_start_timeout_s": 20.0, **overrides,
    }  # fmt: skip
    return SandboxSettings(**values)


async def replica(
    fake: FakeApiServer, tmp: Path, roots: list[WorkspacePool], **overrides: Any
) -> Replica:
    backend = KubernetesBackend(settings(fake, tmp, **overrides))
    await backend.start(reap=False)
    root = Path(tempfile.mkdtemp(prefix="weft-k8s-replica-"))
    pool = WorkspacePool(root, size_bytes=4 * MIB, uid_base=200_000)
    roots.append(pool)
    pool.start()
    return Replica(backend, pool)


def cmd(command: str, **kw: Any) -> Command:
    values: dict[str, Any] = {"timeout_s": 30.0, "stdout_cap": 16384, "stderr_cap": 8192, **kw}
    return Command(command=command, **values)


def ids() -> tuple[str, str]:
    return f"tenant-{secrets.token_hex(4)}", f"session-{secrets.token_hex(4)}"


async def test_a_session_gets_one_pod_with_the_hardened_spec(
    fake: FakeApiServer, tmp_path: Path, roots: list[WorkspacePool]
) -> None:  # SPEC S-01, S-05
    a = await replica(fake, tmp_path, roots)
    tenant, session = ids()
    result = await a.backend.run(a.space(tenant, session), cmd("id -u; echo hi"))
    assert result.exit_code == 0 and result.stdout == b"10001\nhi\n", result

    [pod] = fake.created
    assert pod["metadata"]["name"] == pod_name(tenant, session)
    assert (NAMESPACE, pod_name(tenant, session)) in fake.pods
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    for container in spec["containers"]:
        security = container["securityContext"]
        assert security["runAsUser"] == 10001 and security["runAsNonRoot"] is True
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    [sandbox] = [c for c in spec["containers"] if c["name"] == "sandbox"]
    assert sandbox["resources"]["limits"] == {
        "cpu": "500m", "memory": str(512 * MIB),
        "ephemeral-storage": str(4 * MIB + 64 * MIB + 64 * MIB),
    }  # fmt: skip
    volumes = {v["name"]: v["emptyDir"]["sizeLimit"] for v in spec["volumes"]}
    assert volumes == {"workspace": str(4 * MIB), "tmp": str(64 * MIB)}
    assert pod["metadata"]["labels"]["weft.dev/sandbox-session"] == "true"

    again = await a.backend.run(a.space(tenant, session), cmd("echo again"))
    assert again.stdout == b"again\n" and len(fake.created) == 1  # found by name


async def test_a_new_pod_is_used_only_once_every_container_runs(
    tmp_path: Path, roots: list[WorkspacePool], admission: SandboxAdmission
) -> None:
    async with FakeApiServer(lagging_container="files", lag_reads=3, admission=admission) as fake:
        a = await replica(fake, tmp_path, roots)
        result = await a.backend.run(a.space(*ids()), cmd("echo ready"))
        assert result.stdout == b"ready\n", result
        [pod] = fake.pods.values()
        assert pod.reads > 3  # it waited while the pod was Running with one container


async def test_the_charts_admission_policies_admit_the_backend_and_nothing_else(
    fake: FakeApiServer, tmp_path: Path, roots: list[WorkspacePool]
) -> None:
    """Every test here runs under the chart's policies (the backend's creates, annotation
    patches and execs are admitted); with the sandbox's own credentials, a pod mounting a
    hostPath, a label patch and an exec into another container are refused (403)."""
    a = await replica(fake, tmp_path, roots)
    tenant, session = ids()
    assert (await a.backend.run(a.space(tenant, session), cmd("true"))).exit_code == 0
    name = pod_name(tenant, session)
    pod = fake.created[0]
    escape = {**pod, "metadata": {**pod["metadata"], "name": name + "-x"},
              "spec": {**pod["spec"], "volumes": [{"name": "workspace",
                                                   "hostPath": {"path": "/"}}]}}  # fmt: skip
    unlabel = {"metadata": {"labels": {"weft.dev/sandbox-session": None}}}
    calls = {
        "emptyDir volumes only": lambda api: api.create_namespaced_pod(NAMESPACE, escape),
        "session labels": lambda api: api.patch_namespaced_pod(name, NAMESPACE, unlabel),
    }
    for refusal, call in calls.items():  # the calls block: in a thread, as the backend's
        with pytest.raises(ApiException) as refused:
            await asyncio.to_thread(a.backend._call, call)
        assert refused.value.status == 403 and refusal in str(refused.value.body), refusal
    execs = len(fake.execs)
    with pytest.raises(PodUnavailable, match="403"):
        await asyncio.to_thread(
            a.backend._exec, name, "other", ["true"], b"", bytearray().extend,
            bytearray().extend, timeout_s=5.0,
        )  # fmt: skip
    assert len(fake.execs) == execs  # refused before it ran
    assert fake.execs and {e[1] for e in fake.execs} <= {"sandbox", "files"}


async def test_exec_keeps_the_local_backends_contract(
    fake: FakeApiServer, tmp_path: Path, roots: list[WorkspacePool]
) -> None:  # SPEC T-15
    a = await replica(fake, tmp_path, roots)
    space = a.space(*ids())
    failed = await a.backend.run(space, cmd("printf out; printf err >&2; exit 3"))
    assert (failed.exit_code, failed.stdout, failed.stderr) == (3, b"out", b"err"), failed
    assert not failed.timed_out

    fed = await a.backend.run(space, cmd("tr a-z A-Z; echo $GREETING", stdin=b"abc\n",
                                         env={"GREETING": "hello"}))  # fmt: skip
    assert fed.stdout == b"ABC\nhello\n", fed
    no_stdin = await a.backend.run(space, cmd("cat; echo done"))
    assert no_stdin.stdout == b"done\n", no_stdin  # no stdin: EOF at once, never a hang

    flood = await a.backend.run(space, cmd("head -c 300000 /dev/zero", stdout_cap=1000))
    assert flood.exit_code == 0 and len(flood.stdout) == 1000, flood
    assert flood.stdout_total == 300_000

    (space.work / "sub").mkdir()
    where = await a.backend.run(space, cmd("pwd; echo $HOME", work_dir="/workspace/sub"))
    assert where.stdout == b"/workspace/sub\n/workspace\n", where


async def test_the_workspace_travels_between_the_copy_and_the_pod(
    fake: FakeApiServer, tmp_path: Path, roots: list[WorkspacePool]
) -> None:  # SPEC S-01, S-02
    a = await replica(fake, tmp_path, roots)
    space = a.space(*ids())
    (space.work / "notes.txt").write_text("from a file tool\n")  # as write_sandbox_file does
    (space.work / "input" / "data.csv").write_text("a,b\n1,2\n")  # an attachment
    seen = await a.backend.run(space, cmd("cat notes.txt input/data.csv"))
    assert seen.stdout == b"from a file tool\na,b\n1,2\n", seen

    wrote = await a.backend.run(space, cmd("mkdir -p output && echo report > output/r.md"))
    assert wrote.exit_code == 0, wrote
    assert (space.work / "output" / "r.md").read_text() == "report\n"
    assert (space.work / "input" / "data.csv").exists()  # the pull never touches input

    refused = await a.backend.run(space, cmd("echo x > input/data.csv"))
    assert refused.exit_code != 0 and b"Read-only" in refused.stderr, refused

    (space.work / "notes.txt").unlink()  # a deletion on the copy reaches the pod
    gone = await a.backend.run(space, cmd("ls notes.txt"))
    assert gone.exit_code != 0, gone
    pushes = [e for e in fake.execs if e[1] == "files" and "find" in e[2][2]]
    assert len(pushes) == 2  # only when the copy changed: first call and after the unlink


async def test_a_command_past_its_timeout_is_killed_with_what_it_started(
    fake: FakeApiServer, tmp_path: Path, roots: list[WorkspacePool]
) -> None:  # SPEC T-15
    a = await replica(fake, tmp_path, roots)
    space = a.space(*ids())
    started = time.monotonic()
    stuck = await a.backend.run(
        space,
        cmd("trap '' TERM; (setsid sleep 300 &); echo before; sleep 300", timeout_s=1.0),
    )
    assert stuck.timed_out and stuck.exit_code is None and stuck.stdout == b"before\n", stuck
    assert time.monotonic() - started < 60  # bounded, not the 300 s the command asked for
    left = await a.backend.run(
        space, cmd("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done")
    )
    assert b"sleep 300" not in left.stdout, left.stdout  # the setsid grandchild too


async def test_a_second_replica_finds_the_same_pod_by_name(
    fake: FakeApiServer, tmp_path: Path, roots: list[WorkspacePool]
) -> None:  # SPEC S-05
    tenant, session = ids()
    a = await replica(fake, tmp_path, roots)
    b = await replica(fake, tmp_path, roots)
    await a.backend.run(a.space(tenant, session), cmd("echo $$ > /tmp/marker"))
    seen = await b.backend.run(b.space(tenant, session), cmd("cat /tmp/marker"))
    assert seen.exit_code == 0 and seen.stdout.strip().isdigit(), seen
    assert len(fake.created) == 1


async def test_idle_pods_are_reaped_from_any_replica(
    fake: FakeApiServer, tmp_path: Path, roots: list[WorkspacePool]
) -> None:  # SPEC S-05
    fake.terminating_reads = 2  # a deleted pod lingers, Terminating, as on a cluster
    tenant, session = ids()
    a = await replica(fake, tmp_path, roots)
    b = await replica(fake, tmp_path, roots)
    busy_tenant, busy_session = ids()
    space = a.space(tenant, session)
    (space.work / "kept.txt").write_text("kept\n")
    await a.backend.run(space, cmd("true"))
    await a.backend.run(a.space(busy_tenant, busy_session), cmd("true"))
    assert await b.backend.reap(ttl_s=3600) == 0  # both just used

    name = pod_name(tenant, session)
    fake.pods[(NAMESPACE, name)].manifest["metadata"]["annotations"][LAST_USED] = "1000.0"
    assert not await b.backend.delete(name, resource_version="1")  # changed since: kept
    assert await b.backend.reap(ttl_s=3600) == 1
    assert "deletionTimestamp" in fake.pods[(NAMESPACE, name)].manifest["metadata"]
    assert (NAMESPACE, pod_name(busy_tenant, busy_session)) in fake.pods

    back = await a.backend.run(space, cmd("cat kept.txt"))  # a new pod, the copy pushed
    assert back.stdout == b"kept\n" and len(fake.created) == 3, back
    assert "deletionTimestamp" not in fake.pods[(NAMESPACE, name)].manifest["metadata"]


async def test_a_workspace_grown_past_its_cap_in_the_pod_is_not_kept(
    fake: FakeApiServer, tmp_path: Path, roots: list[WorkspacePool]
) -> None:  # SPEC S-05 (disk fill)
    a = await replica(fake, tmp_path, roots, sandbox_workspace_bytes=MIB)
    space = a.space(*ids())
    (space.work / "small.txt").write_text("small\n")
    (space.work / "input" / "data.csv").write_bytes(b"x" * 600_000)
    # Past the tar stream's cap (2 x 1 MiB + 1 MiB), then past the content cap only (the
    # attachment counts: 600 kB + 500 kB > 1 MiB).
    for fill in ("head -c 5000000 /dev/zero > big", "head -c 500000 /dev/zero > big"):
        with pytest.raises(PodUnavailable, match="over its 1048576-byte cap"):
            await a.backend.run(space, cmd(fill))
        assert not (space.work / "big").exists()
        after = await a.backend.run(space, cmd("ls"))  # the copy is pushed back over the pod
        assert after.stdout.split() == [b"input", b"output", b"small.txt"], after
    fits = await a.backend.run(space, cmd("head -c 300000 /dev/zero > big"))
    assert fits.exit_code == 0 and (space.work / "big").stat().st_size == 300_000


class _Bus:
    def __init__(self) -> None:
        self.published: list[Any] = []

    async def publish(self, topic: Topic, message: Any) -> None:
        self.published.append(message)


@dataclass
class Service:
    """A sandbox replica as the service wires it, on the Kubernetes backend."""

    worker: SandboxWorker
    bus: _Bus

    async def call(self, tenant: str, session: str, tool: str, **arguments: Any) -> Any:
        call = ToolCallRequested(
            tenant_id=tenant, session_id=session, request_id="r1",
            data=ToolCallRequestedData(
                call_id=f"call_{secrets.token_hex(6)}", tool_name=tool, arguments=arguments,
                round=0, deadline=datetime.now(UTC) + timedelta(seconds=120),
                context=ToolContext(user_id="u", agent_id="a", allowed_tools=TOOLS),
            ),
        )  # fmt: skip
        await self.worker.handle(call)
        return self.bus.published[-1].data


async def service(
    fake: FakeApiServer, tmp: Path, roots: list[WorkspacePool],
    sessions: async_sessionmaker[AsyncSession], redis: Redis,
) -> Service:  # fmt: skip
    r = await replica(fake, tmp, roots)
    host = SandboxHost(r.pool, GitCheckpoints(CheckpointStore(sessions)))
    bus = _Bus()
    name = f"k8s-{secrets.token_hex(4)}"
    skills = SkillLibrary(StoreSkills(sessions), tmp / f"skills-{secrets.token_hex(4)}")
    registry = sandbox_registry(host, r.backend, MemorySnapshotStore(), skills)
    worker = SandboxWorker(
        bus,  # type: ignore[arg-type]
        registry,
        host,
        redis,
        worker_name=name,
        prefix=f"{name}.",
    )
    return Service(worker, bus)


async def test_the_sandbox_tools_and_checkpoints_work_unchanged_on_pods(
    fake: FakeApiServer, tmp_path: Path, roots: list[WorkspacePool],
    sessions: async_sessionmaker[AsyncSession], redis: Redis,
) -> None:  # SPEC S-03, T-14, T-15, T-16  # fmt: skip
    tenant, session = ids()
    a = await service(fake, tmp_path, roots, sessions, redis)
    b = await service(fake, tmp_path, roots, sessions, redis)
    wrote = await a.call(tenant, session, "write_sandbox_file", path="notes.md", content="one\n")
    assert wrote.success and wrote.data["checkpoint"] == 1, wrote
    ran = await a.call(
        tenant, session, "shell_exec", command="cat notes.md; echo done > output/r.md"
    )
    assert ran.success and "exit_code: 0" in ran.output and "one" in ran.output, ran
    assert ran.data["checkpoint"] == 2, ran

    read = await b.call(tenant, session, "read_file", path="/workspace/output/r.md")
    assert read.success and read.output == "done\n", read  # b restored checkpoint 2
    listed = await b.call(tenant, session, "shell_exec", command="ls output")
    assert listed.success and "r.md" in listed.output, listed
    stuck = await b.call(tenant, session, "shell_exec", command="sleep 30", timeout_sec=1)
    assert not stuck.success and "timeout" in (stuck.error or ""), stuck
    assert len(fake.created) == 1  # one pod for the session, whichever replica
    filled = await b.call(tenant, session, "shell_exec", command="head -c 5000000 /dev/zero > f")
    assert not filled.success and "cap; this command's changes were undone" in filled.error
    after = await b.call(tenant, session, "shell_exec", command="ls")
    assert after.success and "f\n" not in after.output and "notes.md" in after.output, after
    # The pod has no mount of the replica's skill packages: a skill's script is refused
    # with a reason the model can act on, never run without its files.
    skill = await b.call(tenant, session, "shell_exec", command="sh run.sh", skill_name="x")
    assert not skill.success and "kubernetes" in (skill.error or ""), skill
