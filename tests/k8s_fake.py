"""A local fake of the Kubernetes API server, for the sandbox's Kubernetes backend tests.

It serves the few endpoints the backend uses, over HTTP on 127.0.0.1, with a bearer token:
create, get, patch (annotations), list (equality label selector) and delete (with a
resource-version precondition) of pods, and the exec websocket (``v4.channel.k8s.io``:
channel bytes 0 stdin, 1 stdout, 2 stderr, 3 the status JSON).

Each container of a pod is a long-lived bubblewrap process with a PID namespace of its own,
its ``command`` as pid 1 and its ``volumeMounts`` bound from the pod's directory
(``readOnly`` honoured, ``subPath`` included); an exec enters that container's namespaces
with ``nsenter`` as its ``runAsUser``, so ``kill -1`` inside reaches the container's
processes only, as in a real pod. A pod becomes Running once every container's pid 1 is up.
Needs root, bubblewrap and nsenter (the local backend's tests need the first two).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import os
import shutil
import signal
import tempfile
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from tests.k8s_admission import SandboxAdmission

TOKEN = "fake-cluster-token"
PROTOCOL = "v4.channel.k8s.io"


def usable() -> str | None:
    """Why the fake cannot run here, or None."""
    if os.geteuid() != 0:
        return "the fake API server's containers need root (nsenter, bind mounts)"
    for tool in ("bwrap", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


@dataclass
class _Container:
    name: str
    uid: int
    process: asyncio.subprocess.Process
    init_pid: int | None = None


@dataclass
class FakePod:
    """One pod: its manifest as stored and its containers."""

    manifest: dict[str, Any]
    root: Path
    containers: dict[str, _Container] = field(default_factory=dict)
    reads: int = 0
    terminating_reads: int = 0

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])


def _denied(refusals: list[str]) -> web.Response:
    """What an API server answers when a ValidatingAdmissionPolicy (reason Forbidden) denies."""
    return _status(
        403, "Forbidden", "ValidatingAdmissionPolicy denied request: " + "; ".join(refusals)
    )


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip
    return web.json_response(body, status=code)


class FakeApiServer:
    """The fake; ``async with FakeApiServer() as api: api.url``."""

    def __init__(
        self,
        *,
        lagging_container: str = "",
        lag_reads: int = 0,
        admission: SandboxAdmission | None = None,
    ) -> None:
        self.admission = admission
        """The chart's admission policies, applied to every create, patch and exec as the
        sandbox's ServiceAccount (a refusal answers 403 with the policy's message)."""
        self.lagging_container = lagging_container
        self.lag_reads = lag_reads
        """That container is reported waiting for the first ``lag_reads`` reads of its pod."""
        self.terminating_reads = 0
        """A deleted pod stays, Terminating, for this many reads of it (0: gone at once)."""
        self.pods: dict[tuple[str, str], FakePod] = {}
        self.created: list[dict[str, Any]] = []
        """Every pod body received, as sent."""
        self.execs: list[tuple[str, str, list[str]]] = []
        """(pod, container, command) of every exec."""
        self._versions = itertools.count(1)
        self._root = Path(tempfile.mkdtemp(prefix="weft-fake-k8s-"))
        self._root.chmod(0o711)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> FakeApiServer:
        app = web.Application(middlewares=[self._auth], client_max_size=64 * 1024 * 1024)
        base = "/api/v1/namespaces/{ns}/pods"
        app.router.add_post(base, self._create)
        app.router.add_get(base, self._list)
        app.router.add_get(base + "/{name}", self._get)
        app.router.add_patch(base + "/{name}", self._patch)
        app.router.add_delete(base + "/{name}", self._delete)
        app.router.add_get(base + "/{name}/exec", self._exec)
        app.router.add_post(base + "/{name}/exec", self._exec)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *_: object) -> None:
        for pod in list(self.pods.values()):
            await self._stop(pod)
        self.pods.clear()
        if self._runner is not None:
            await self._runner.cleanup()
        shutil.rmtree(self._root, ignore_errors=True)

    def kubeconfig(self, path: Path, namespace: str = "weft-test") -> Path:
        """A kubeconfig pointing at this server with its token."""
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "sandbox", "user": {"token": TOKEN}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "sandbox",
                                                      "namespace": namespace}}],
        }  # fmt: skip
        path.write_text(json.dumps(config))
        return path

    # -- HTTP ----------------------------------------------------------------------------

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized", "Unauthorized")
        response: web.StreamResponse = await handler(request)
        return response

    async def _create(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        body = await request.json()
        self.created.append(json.loads(json.dumps(body)))
        name = body.get("metadata", {}).get("name", "")
        if not name or not body.get("spec", {}).get("containers"):
            return _status(422, "Invalid", "metadata.name and spec.containers are required")
        if refused := self.admission and self.admission.pod(body, "CREATE"):
            return _denied(refused)
        if (ns, name) in self.pods:
            return _status(409, "AlreadyExists", f'pods "{name}" already exists')
        meta = body["metadata"]
        meta.update(namespace=ns, uid=str(uuid.uuid4()), resourceVersion=self._version(),
                    creationTimestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))  # fmt: skip
        body["status"] = {"phase": "Pending"}
        pod = FakePod(body, self._root / f"{ns}-{name}")
        self.pods[(ns, name)] = pod
        await self._start(pod)
        return web.json_response(body, status=201)

    async def _get(self, request: web.Request) -> web.Response:
        pod = self._find(request)
        if pod is None:
            return self._not_found(request)
        if "deletionTimestamp" in pod.manifest["metadata"]:
            pod.terminating_reads -= 1
            if pod.terminating_reads <= 0:
                del self.pods[(request.match_info["ns"], pod.name)]
            return web.json_response(pod.manifest)
        self._refresh(pod)
        return web.json_response(pod.manifest)

    async def _list(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        wanted = dict(
            part.split("=", 1)
            for part in request.query.get("labelSelector", "").split(",")
            if "=" in part
        )
        items = []
        for (pod_ns, _), pod in self.pods.items():
            labels = pod.manifest["metadata"].get("labels") or {}
            if pod_ns == ns and all(labels.get(k) == v for k, v in wanted.items()):
                self._refresh(pod)
                items.append(pod.manifest)
        body = {"kind": "PodList", "apiVersion": "v1",
                "metadata": {"resourceVersion": self._version()}, "items": items}  # fmt: skip
        return web.json_response(body)

    async def _patch(self, request: web.Request) -> web.Response:
        pod = self._find(request)
        if pod is None:
            return self._not_found(request)
        merges = ("application/merge-patch+json", "application/strategic-merge-patch+json")
        if request.content_type not in (*merges, "application/json-patch+json"):
            return _status(415, "UnsupportedMediaType", request.content_type)
        patch = await request.json()
        if request.content_type not in merges:  # a JSON patch is a list of operations
            if not isinstance(patch, list):
                return _status(400, "BadRequest", "json: cannot unmarshal object into []Patch")
            return _status(422, "Invalid", "the fake implements merge patches only")
        patched = copy.deepcopy(pod.manifest)
        meta = patched["metadata"]
        for key in ("annotations", "labels"):
            for k, v in ((patch.get("metadata") or {}).get(key) or {}).items():
                if v is None:
                    meta.setdefault(key, {}).pop(k, None)
                else:
                    meta.setdefault(key, {})[k] = v
        if refused := self.admission and self.admission.pod(patched, "UPDATE"):
            return _denied(refused)
        pod.manifest["metadata"] = meta
        meta["resourceVersion"] = self._version()
        self._refresh(pod)
        return web.json_response(pod.manifest)

    async def _delete(self, request: web.Request) -> web.Response:
        pod = self._find(request)
        if pod is None:
            return self._not_found(request)
        body = await request.json() if request.can_read_body else {}
        wanted = ((body or {}).get("preconditions") or {}).get("resourceVersion")
        current = pod.manifest["metadata"]["resourceVersion"]
        if wanted and wanted != current:
            return _status(
                409, "Conflict",
                f"Precondition failed: ResourceVersion in precondition: {wanted}, "
                f"ResourceVersion in object meta: {current}",
            )  # fmt: skip
        await self._stop(pod)
        pod.manifest["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        pod.terminating_reads = self.terminating_reads
        if not pod.terminating_reads:
            del self.pods[(request.match_info["ns"], pod.name)]
        return web.json_response(pod.manifest)

    def _find(self, request: web.Request) -> FakePod | None:
        return self.pods.get((request.match_info["ns"], request.match_info["name"]))

    @staticmethod
    def _not_found(request: web.Request) -> web.Response:
        return _status(404, "NotFound", f'pods "{request.match_info["name"]}" not found')

    def _version(self) -> str:
        return str(next(self._versions))

    # -- containers ----------------------------------------------------------------------

    async def _start(self, pod: FakePod) -> None:
        spec = pod.manifest["spec"]
        pod_uid = int((spec.get("securityContext") or {}).get("runAsUser", 0))
        volumes = {v["name"]: pod.root / "volumes" / v["name"] for v in spec.get("volumes", [])}
        for directory in volumes.values():
            directory.mkdir(parents=True)
            os.chown(directory, pod_uid, pod_uid)
        pod.root.chmod(0o711)
        (pod.root / "volumes").chmod(0o711)
        for container in spec["containers"]:
            uid = int((container.get("securityContext") or {}).get("runAsUser", pod_uid))
            argv = ["bwrap", "--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts",
                    "--unshare-net", "--die-with-parent", "--ro-bind", "/usr", "/usr"]  # fmt: skip
            for link in ("bin", "lib", "lib64", "sbin"):
                argv += ["--symlink", f"usr/{link}", f"/{link}"]
            argv += ["--ro-bind-try", "/etc/alternatives", "/etc/alternatives"]
            argv += ["--proc", "/proc", "--dev", "/dev"]
            mounts = sorted(container.get("volumeMounts", []), key=lambda m: len(m["mountPath"]))
            for mount in mounts:
                source = volumes[mount["name"]] / mount.get("subPath", "")
                source.mkdir(exist_ok=True)
                os.chown(source, uid, uid)
                bind = "--ro-bind" if mount.get("readOnly") else "--bind"
                argv += [bind, str(source), mount["mountPath"]]
            argv += ["--", *container["command"]]
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, start_new_session=True
            )
            pod.containers[container["name"]] = _Container(container["name"], uid, process)

    def _refresh(self, pod: FakePod) -> None:
        """Running once every container's pid 1 is up (bubblewrap's child)."""
        pod.reads += 1
        for container in pod.containers.values():
            if container.name == self.lagging_container and pod.reads <= self.lag_reads:
                continue
            if container.init_pid is None:
                pid = container.process.pid
                with contextlib.suppress(OSError):
                    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                    container.init_pid = int(children[0]) if children else None
        statuses = [
            {"name": c.name, "ready": bool(c.init_pid), "restartCount": 0, "image": "fake",
             "imageID": "", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
             if c.init_pid else {"waiting": {"reason": "ContainerCreating"}}}
            for c in pod.containers.values()
        ]  # fmt: skip
        # Running as soon as one container runs, as the kubelet reports it.
        running = any(c.init_pid for c in pod.containers.values())
        pod.manifest["status"] = {"phase": "Running" if running else "Pending",
                                  "podIP": "10.0.0.2", "containerStatuses": statuses}  # fmt: skip

    async def _stop(self, pod: FakePod) -> None:
        for container in pod.containers.values():
            for pid in (container.init_pid, container.process.pid):
                if pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            await container.process.wait()
        shutil.rmtree(pod.root, ignore_errors=True)

    # -- exec ----------------------------------------------------------------------------

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        pod = self._find(request)
        if pod is None:
            return self._not_found(request)
        self._refresh(pod)
        command = request.query.getall("command", [])
        asked = request.query.get("container")
        if refused := self.admission and self.admission.connect(pod.name, asked):
            return _denied(refused)
        name = asked or next(iter(pod.containers))
        container = pod.containers.get(name)
        if container is None or container.init_pid is None or not command:
            return _status(400, "BadRequest", f"container {name} is not running or no command")
        self.execs.append((pod.name, name, command))
        ws = web.WebSocketResponse(protocols=(PROTOCOL,), max_msg_size=0)
        await ws.prepare(request)
        pid = str(container.init_pid)
        proc = await asyncio.create_subprocess_exec(
            "nsenter", "-t", pid, "-m", "-p", "-n", "-i", "-u",
            "-S", str(container.uid), "-G", str(container.uid), "--", *command,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdin and proc.stdout and proc.stderr
        stdin = proc.stdin

        async def pump(stream: asyncio.StreamReader, channel: int) -> None:
            while chunk := await stream.read(65536):
                with contextlib.suppress(ConnectionError):
                    await ws.send_bytes(bytes([channel]) + chunk)

        async def feed() -> None:
            async for message in ws:
                if message.type is WSMsgType.BINARY and message.data[:1] == b"\x00":
                    with contextlib.suppress(ConnectionError):
                        stdin.write(message.data[1:])
                        await stdin.drain()

        feeder = asyncio.create_task(feed())
        await asyncio.gather(pump(proc.stdout, 1), pump(proc.stderr, 2))
        code = await proc.wait()
        if code < 0:  # killed by a signal: reported as the shell would (137 for SIGKILL)
            code = 128 - code
        feeder.cancel()
        if code == 0:
            status: dict[str, Any] = {"metadata": {}, "status": "Success"}
        else:
            status = {
                "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                "message": f"command terminated with non-zero exit code: exit status {code}",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
            }  # fmt: skip
        with contextlib.suppress(ConnectionError):
            await ws.send_bytes(b"\x03" + json.dumps(status).encode())
            await ws.close()
        return ws
