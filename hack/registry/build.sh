#!/usr/bin/env bash
# Builds the CNCF distribution registry (github.com/distribution/distribution/v3,
# the reference OCI registry) from the Go module proxy into
#   ${AGENT_SANDBOX_CACHE:-~/.cache/agent-sandbox}/bin/registry-<version>/registry
# and prints that directory. The version is the one pinned in this directory's
# go.mod; a binary that already exists is not rebuilt. The e2e tests run it on
# the node's address as the registry `make push` pushes to and containerd
# pulls from (internal/localcluster/registry.go).
set -euo pipefail
cd "$(dirname "$0")"
VERSION="$(awk '$1=="require" && $2=="github.com/distribution/distribution/v3" {print $3; exit} $1=="github.com/distribution/distribution/v3" {print $2; exit}' go.mod)"
[ -n "$VERSION" ] || { echo "hack/registry: no github.com/distribution/distribution/v3 in go.mod" >&2; exit 1; }
CACHE="${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}"
OUT="$CACHE/bin/registry-$VERSION"
mkdir -p "$OUT"
if [ ! -x "$OUT/registry" ]; then
  start=$(date +%s)
  echo "building registry $VERSION (first time only)..." >&2
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="-s -w -X github.com/distribution/distribution/v3/version.version=$VERSION" \
    -o "$OUT/.registry.tmp" github.com/distribution/distribution/v3/cmd/registry
  mv "$OUT/.registry.tmp" "$OUT/registry"
  echo "built registry in $(( $(date +%s) - start ))s" >&2
fi
echo "$OUT"
