#!/usr/bin/env bash
# Build the web console (console/ -> console/dist, served by the gateway at /; docs/console.md)
# when its build is missing or older than its sources: `npm ci` from package-lock.json, then
# `npm run build` (tsc, then vite). Installs Node.js and npm from Debian when missing. Quiet
# and quick (no npm at all) when dist/ is newer than every source file and the lock.
#   --browser: also make sure Debian's chromium is installed (the browser tests drive it
#   through Playwright, which cannot download its own browser here).
set -euo pipefail
# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=lib.sh
source "$WEFT_REPO/deploy/local/lib.sh"

CONSOLE="$WEFT_REPO/console"
t0="$(now_s)"

apt_install() {
    local sudo=()
    [[ $EUID -eq 0 ]] || sudo=(sudo -E)
    say "installing Debian packages: $*"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -q update >/dev/null
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -q -y \
        install --no-install-recommends "$@" >/dev/null
}

missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [[ "${1:-}" == --browser ]] && ! command -v chromium >/dev/null 2>&1; then
    missing+=(chromium)
fi
((${#missing[@]} == 0)) || apt_install "${missing[@]}"

stamp="$CONSOLE/dist/index.html"
newer="$(find "$CONSOLE/src" "$CONSOLE/index.html" "$CONSOLE/package.json" "$CONSOLE/package-lock.json" \
    "$CONSOLE/vite.config.ts" "$CONSOLE/tsconfig.json" -newer "$stamp" -print -quit 2>/dev/null || echo missing)"
if [[ -f "$stamp" && -z "$newer" ]]; then
    exit 0
fi
cd "$CONSOLE"
log="$(mktemp)"
if ! { npm ci --no-audit --no-fund && npm run build; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    rm -f "$log"
    die "the console build failed (cd console && npm ci && npm run build)"
fi
rm -f "$log"
say "console built in $(elapsed "$t0")s ($CONSOLE/dist)"
