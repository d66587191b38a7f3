#!/usr/bin/env bash
# Install the Helm CLI into $HOME/.cache/weft/bin (idempotent).
#
# Helm is built from source with `go install` through the Go module proxy, because
# prebuilt release binaries cannot be downloaded in every environment we run in. Takes
# ~3-4 minutes on 2 cores the first time; a no-op when the wanted version is already there.
# tests/unit/test_deploy_manifests.py looks for helm in PATH, then in the directory below.
#
# Usage: deploy/tools/install-helm.sh               # install if missing or another version
#        HELM_VERSION=v3.22.0 deploy/tools/install-helm.sh
#        FORCE=1 deploy/tools/install-helm.sh       # rebuild anyway
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
# Kubernetes version helm assumes when no cluster is reachable (`helm template`, `helm lint`);
# the official builds derive it from their client-go (v0.37 -> 1.37). go install alone would
# leave helm's fallback of 1.20.
HELM_K8S_MAJOR="${HELM_K8S_MAJOR:-1}"
HELM_K8S_MINOR="${HELM_K8S_MINOR:-37}"
BIN_DIR="${WEFT_TOOLS_BIN:-${HOME:-/root}/.cache/weft/bin}"
HELM="$BIN_DIR/helm"

if [[ -x "$HELM" && -z "${FORCE:-}" ]]; then
    have="$("$HELM" version --template '{{.Version}}' 2>/dev/null || true)"
    if [[ "$have" == "$HELM_VERSION" ]]; then
        echo "helm $have already installed: $HELM"
        exit 0
    fi
    echo "found helm '${have:-unknown}' at $HELM, want $HELM_VERSION: rebuilding"
fi

if ! command -v go >/dev/null 2>&1; then
    echo "error: 'go' is required to build helm (go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION)" >&2
    exit 1
fi

mkdir -p "$BIN_DIR"
echo "building helm $HELM_VERSION with go install into $BIN_DIR (a few minutes the first time)"
start=$(date +%s)
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags+=" -X ${pkg}.k8sVersionMajor=${HELM_K8S_MAJOR} -X ${pkg}.k8sVersionMinor=${HELM_K8S_MINOR}"
done
CGO_ENABLED=0 GOBIN="$BIN_DIR" GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
    go install -trimpath -ldflags="$ldflags" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
end=$(date +%s)
echo "installed helm $("$HELM" version --template '{{.Version}}') at $HELM in $((end - start))s"
