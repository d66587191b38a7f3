"""Refresh the vendored CRD schemas the chart's objects are validated against offline.

    python tests/schemas/crds/refresh.py            # the pinned versions below
    python tests/schemas/crds/refresh.py keda=v2.18.0

Each CRD comes from its project's Go module, fetched through the Go module proxy
(`go mod download -json MODULE@VERSION`, GOPROXY=https://proxy.golang.org by default): no
cluster and no GitHub access needed. For every (CRD file, API version) in SOURCES, the
version's `openAPIV3Schema` is written to `<group>_<plural>_<version>.json` beside this
script, and VERSIONS.json records the module and version each came from. Bump a version
here (or on the command line), run it, and commit the JSON files with the chart change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent

# name -> (Go module, version, [(path of the CRD in the module, API version)])
SOURCES: dict[str, tuple[str, str, list[tuple[str, str]]]] = {
    "keda": (
        "github.com/kedacore/keda/v2",
        "v2.17.2",
        [
            ("config/crd/bases/keda.sh_scaledobjects.yaml", "v1alpha1"),
            ("config/crd/bases/keda.sh_triggerauthentications.yaml", "v1alpha1"),
        ],
    ),
    "gateway-api": (
        "sigs.k8s.io/gateway-api",
        "v1.3.0",
        [("config/crd/standard/gateway.networking.k8s.io_httproutes.yaml", "v1")],
    ),
    "prometheus-operator": (
        "github.com/prometheus-operator/prometheus-operator",
        "v0.83.0",
        [
            (f"example/prometheus-operator-crd/monitoring.coreos.com_{plural}.yaml", "v1")
            for plural in ("servicemonitors", "podmonitors", "prometheusrules")
        ],
    ),
}


def module_dir(module: str, version: str) -> Path:
    env = {**os.environ, "GOPROXY": os.environ.get("GOPROXY", "https://proxy.golang.org")}
    env.setdefault("GOFLAGS", "-mod=mod")
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        env=env, capture_output=True, text=True, check=True, cwd=HERE,
    ).stdout  # fmt: skip
    info = json.loads(out)
    if info.get("Error"):
        raise SystemExit(f"{module}@{version}: {info['Error']}")
    return Path(info["Dir"])


def main(argv: list[str]) -> int:
    overrides = dict(arg.split("=", 1) for arg in argv)
    versions: dict[str, dict[str, str]] = {}
    for name, (module, pinned, crds) in SOURCES.items():
        version = overrides.get(name, pinned)
        root = module_dir(module, version)
        for path, api_version in crds:
            crd = yaml.safe_load((root / path).read_text())
            spec = crd["spec"]
            (entry,) = [v for v in spec["versions"] if v["name"] == api_version]
            schema = entry["schema"]["openAPIV3Schema"]
            target = HERE / f"{spec['group']}_{spec['names']['plural']}_{api_version}.json"
            target.write_text(json.dumps(schema, sort_keys=True, separators=(",", ":")) + "\n")
            versions[target.name] = {
                "module": module, "version": version, "path": path,
                "kind": spec["names"]["kind"], "apiVersion": f"{spec['group']}/{api_version}",
            }  # fmt: skip
    (HERE / "VERSIONS.json").write_text(json.dumps(versions, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
