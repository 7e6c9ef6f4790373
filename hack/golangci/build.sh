#!/usr/bin/env bash
# Builds golangci-lint with the Kubernetes API linter compiled in (the
# kube-api-linter module's golangci-lint-kube-api-linter command: stock
# golangci-lint plus the "kubeapilinter" module plugin) from the Go module
# proxy into
#   ${AGENT_SANDBOX_CACHE:-~/.cache/agent-sandbox}/bin/golangci-lint-<version>-kal-<kal version>/golangci-lint
# and prints the binary's path. Both versions are pinned in this directory's
# go.mod. `golangci-lint custom` is not used: it clones golangci-lint with git,
# and this machine reaches only the module proxy. An existing binary is not
# rebuilt, so a warm run is a no-op. `--print` prints the path without building.
set -euo pipefail
cd "$(dirname "$0")"
modver() { awk -v m="$1" '$1==m {print $2; exit} $1=="require" && $2==m {print $3; exit}' go.mod; }
VERSION="$(modver github.com/golangci/golangci-lint/v2)"
KAL="$(modver sigs.k8s.io/kube-api-linter)"
CACHE="${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}"
OUT="$CACHE/bin/golangci-lint-$VERSION-kal-${KAL##*-}"
BIN="$OUT/golangci-lint"
if [ "${1:-}" = "--print" ]; then echo "$BIN"; exit 0; fi
if [ ! -x "$BIN" ]; then
  mkdir -p "$OUT"
  start=$(date +%s)
  echo "building golangci-lint $VERSION with kube-api-linter $KAL (first time only; several minutes on 2 cores)..." >&2
  CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 go build -trimpath -ldflags="-s -w" \
    -o "$OUT/.golangci-lint.tmp" sigs.k8s.io/kube-api-linter/cmd/golangci-lint-kube-api-linter
  mv "$OUT/.golangci-lint.tmp" "$BIN"
  echo "built golangci-lint in $(( $(date +%s) - start ))s" >&2
fi
echo "$BIN"
