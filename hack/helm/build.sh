#!/usr/bin/env bash
# Builds the helm CLI from the Go module proxy into
#   ${AGENT_SANDBOX_CACHE:-~/.cache/agent-sandbox}/bin/helm-<version>/helm
# and prints the binary's path. The version is the one pinned in this
# directory's go.mod (`tool helm.sh/helm/v3/cmd/helm`). An existing binary is
# not rebuilt, so a warm run is a no-op; the first build takes about four
# minutes on 2 cores. `--print` prints the path without building.
# Used by the chart tests (test/install: helm lint, template, install).
set -euo pipefail
cd "$(dirname "$0")"
VERSION="$(awk '$1=="require" && $2=="helm.sh/helm/v3" {print $3; exit} $1=="helm.sh/helm/v3" {print $2; exit}' go.mod)"
CACHE="${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}"
OUT="$CACHE/bin/helm-$VERSION"
BIN="$OUT/helm"
if [ "${1:-}" = "--print" ]; then echo "$BIN"; exit 0; fi
if [ ! -x "$BIN" ]; then
  mkdir -p "$OUT"
  start=$(date +%s)
  echo "building helm $VERSION (first time only; several minutes on 2 cores)..." >&2
  CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 go build -trimpath \
    -ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION" \
    -o "$OUT/.helm.tmp" helm.sh/helm/v3/cmd/helm
  mv "$OUT/.helm.tmp" "$BIN"
  echo "built helm in $(( $(date +%s) - start ))s" >&2
fi
echo "$BIN"
