#!/usr/bin/env bash
# Builds CoreDNS (only the plugins the local cluster uses, see main.go) into
#   ${AGENT_SANDBOX_CACHE:-~/.cache/agent-sandbox}/bin/coredns-<version>/coredns
# and prints that directory. The version is pinned in this directory's go.mod.
# A binary that already exists is not rebuilt unless main.go (the plugin
# list) or go.mod changed since (by content: a fresh clone's mtimes say
# nothing), so a warm run is a no-op.
set -euo pipefail
cd "$(dirname "$0")"
VERSION="$(awk '$1=="require" && $2=="github.com/coredns/coredns" {print $3; exit} $1=="github.com/coredns/coredns" {print $2; exit}' go.mod)"
CACHE="${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}"
OUT="$CACHE/bin/coredns-$VERSION"
mkdir -p "$OUT"
SRC_SUM="$(cat main.go go.mod | sha256sum | cut -d' ' -f1)"
if [ ! -x "$OUT/coredns" ] || [ "$(cat "$OUT/.source-sha256" 2>/dev/null)" != "$SRC_SUM" ]; then
  start=$(date +%s)
  echo "building coredns $VERSION (first time only; a few minutes on 2 cores)..." >&2
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
    -ldflags="-s -w -X github.com/coredns/coredns/coremain.GitCommit=$VERSION" -o "$OUT/.coredns.tmp" .
  mv "$OUT/.coredns.tmp" "$OUT/coredns"
  echo "$SRC_SUM" > "$OUT/.source-sha256"
  echo "built coredns in $(( $(date +%s) - start ))s" >&2
fi
echo "$OUT"
