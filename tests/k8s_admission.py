"""The Helm chart's admission policies on the sandbox's session pods
(helm/weft/templates/sandbox-admission.yaml), evaluated offline with cel-python (``celpy``)
as an API server would apply them to the sandbox ServiceAccount's requests. Used by
tests/unit/test_sandbox_admission.py and, through tests/k8s_fake.py, by the Kubernetes
backend's tests against the fake API server. No cluster has run these policies: an API
server types ``object`` by the OpenAPI schema where cel-python sees plain maps, which is
why the policies keep to standard CEL (has, all, in, size, startsWith).
"""

from __future__ import annotations

from typing import Any

import celpy
from celpy.adapter import json_to_cel

SANDBOX_USER = "system:serviceaccount:default:weft-sandbox"
"""The sandbox's ServiceAccount as `helm template` renders it (release weft, namespace default)."""


class Policy:
    """One rendered ValidatingAdmissionPolicy, its CEL compiled by cel-python."""

    def __init__(self, doc: dict[str, Any]):
        spec = doc["spec"]
        self.name: str = doc["metadata"]["name"]
        self.rules: list[dict[str, Any]] = spec["matchConstraints"]["resourceRules"]
        env = celpy.Environment()
        self._conditions = [env.program(env.compile(c["expression"])) for c in
                            spec.get("matchConditions", [])]  # fmt: skip
        self._validations = [
            (v["message"], env.program(env.compile(v["expression"]))) for v in spec["validations"]
        ]

    def refusals(self, request: dict[str, Any], obj: dict[str, Any]) -> list[str]:
        """The messages of the validations ``obj`` fails ([]: admitted); raises when a
        matchCondition leaves the request out of the policy."""
        activation = {"request": json_to_cel(request), "object": json_to_cel(obj)}
        assert all(_true(c, activation) for c in self._conditions), "request not matched"
        return [message for message, program in self._validations
                if not _true(program, activation)]  # fmt: skip

    def matches_user(self, username: str) -> bool:
        """Whether the policy's matchConditions take a request of ``username``."""
        activation = {"request": json_to_cel({"userInfo": {"username": username}})}
        return all(_true(c, activation) for c in self._conditions)


def _true(program: Any, activation: dict[str, Any]) -> bool:
    result = program.evaluate(activation)
    # An evaluation error would also refuse on a cluster (failurePolicy Fail); here it fails
    # the test, so every expression guards its field accesses with has().
    assert isinstance(result, celpy.celtypes.BoolType), f"not a bool: {result!r}"
    return bool(result)


class SandboxAdmission:
    """The chart's two sandbox policies, ``<namespace>-pods`` and ``<namespace>-exec``."""

    def __init__(self, docs: list[dict[str, Any]], namespace: str):
        policies = {d["metadata"]["name"]: d for d in docs
                    if d["kind"] == "ValidatingAdmissionPolicy"}  # fmt: skip
        self.namespace = namespace
        self.pods = Policy(policies[f"{namespace}-pods"])
        self.exec = Policy(policies[f"{namespace}-exec"])

    def pod(self, pod: dict[str, Any], operation: str = "CREATE") -> list[str]:
        """Why a create or update of ``pod`` (the object after the change) is refused."""
        return self.pods.refusals(self._request(operation, pod["metadata"].get("name", "")), pod)

    def connect(self, pod: str, container: str | None, subresource: str = "exec") -> list[str]:
        """Why an exec (attach, port-forward) into ``container`` of ``pod`` is refused."""
        options: dict[str, Any] = {"kind": "PodExecOptions", "apiVersion": "v1",
                                   "stdout": True, "stderr": True}  # fmt: skip
        if container is not None:
            options["container"] = container
        return self.exec.refusals(self._request("CONNECT", pod, subresource), options)

    def _request(self, operation: str, name: str, subresource: str = "") -> dict[str, Any]:
        return {
            "operation": operation, "userInfo": {"username": SANDBOX_USER},
            "namespace": self.namespace, "name": name, "subResource": subresource,
            "resource": {"group": "", "version": "v1", "resource": "pods"},
        }  # fmt: skip
