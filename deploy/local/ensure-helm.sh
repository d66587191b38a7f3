#!/usr/bin/env bash
# Install the Helm CLI only when it is missing, for the targets that need it: the chart
# tests (tests/unit/test_deploy_manifests.py, run by `make test-unit` and so `make test`).
# Not part of bootstrap.sh: `make up` and `make demo` never render the chart, and building
# helm with `go install` takes minutes on a fresh machine. Silent when helm is there.
set -euo pipefail
# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=lib.sh
source "$WEFT_REPO/deploy/local/lib.sh"

# The places tests/unit/test_deploy_manifests.py looks: PATH, then ~/.cache/weft/bin.
if command -v helm >/dev/null 2>&1 || [[ -x "${WEFT_CACHE}/bin/helm" ]]; then
    exit 0
fi
t0="$(now_s)"
say "installing helm for the chart tests (deploy/tools/install-helm.sh)"
"$WEFT_REPO/deploy/tools/install-helm.sh" >/dev/null
say "helm installed in $(elapsed "$t0")s"
