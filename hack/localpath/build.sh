#!/usr/bin/env bash
# Builds rancher's local-path-provisioner into
#   ${AGENT_SANDBOX_CACHE:-~/.cache/agent-sandbox}/bin/local-path-provisioner-<version>/
# and prints that directory. The version is pinned in this directory's go.mod.
set -euo pipefail
cd "$(dirname "$0")"
MOD=github.com/rancher/local-path-provisioner
VERSION="$(awk -v m="$MOD" '$1=="require" && $2==m {print $3; exit} $1==m {print $2; exit}' go.mod)"
CACHE="${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}"
OUT="$CACHE/bin/local-path-provisioner-$VERSION"
mkdir -p "$OUT"
if [ ! -x "$OUT/local-path-provisioner" ]; then
  start=$(date +%s)
  echo "building local-path-provisioner $VERSION (first time only; about a minute on 2 cores)..." >&2
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="-s -w" -o "$OUT/.local-path-provisioner.tmp" "$MOD"
  mv "$OUT/.local-path-provisioner.tmp" "$OUT/local-path-provisioner"
  echo "built local-path-provisioner in $(( $(date +%s) - start ))s" >&2
fi
echo "$OUT"
