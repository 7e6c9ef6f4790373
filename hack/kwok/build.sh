#!/usr/bin/env bash
# Builds the kwok controller from the Go module proxy into
#   ${AGENT_SANDBOX_CACHE:-~/.cache/agent-sandbox}/bin/kwok-<version>/kwok
# with the node and pod Stages it runs (stages.yaml, next to it), and prints
# the binary's path. The version is the one pinned in this
# directory's go.mod. An existing binary is not rebuilt, so a warm run is a
# no-op. `--print` prints the path without building.
# Used by internal/kwokstack (the scale benchmarks): kwok simulates nodes and
# moves pods bound to them to Running/Ready without any container runtime.
set -euo pipefail
cd "$(dirname "$0")"
VERSION="$(awk '$1=="require" && $2=="sigs.k8s.io/kwok" {print $3; exit} $1=="sigs.k8s.io/kwok" {print $2; exit}' go.mod)"
CACHE="${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}"
OUT="$CACHE/bin/kwok-$VERSION"
BIN="$OUT/kwok"
if [ "${1:-}" = "--print" ]; then echo "$BIN"; exit 0; fi
if [ ! -x "$BIN" ]; then
  mkdir -p "$OUT"
  start=$(date +%s)
  echo "building kwok $VERSION (first time only; a few minutes on 2 cores)..." >&2
  CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 go build -trimpath \
    -ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$VERSION" \
    -o "$OUT/.kwok.tmp" sigs.k8s.io/kwok/cmd/kwok
  mv "$OUT/.kwok.tmp" "$BIN"
  echo "built kwok in $(( $(date +%s) - start ))s" >&2
fi
# kwok ships no built-in lifecycle: its Stages come from config. Take the
# "fast" node and pod stages of the same pinned module (nodes Ready at once,
# pods Running/Ready as soon as they are bound, deleted pods removed) so the
# behaviour moves with the version, and keep them next to the binary.
STAGES="$OUT/stages.yaml"
if [ ! -s "$STAGES" ]; then
  DIR="$(GOFLAGS=-mod=mod go mod download -json sigs.k8s.io/kwok@"$VERSION" | awk -F'"' '$2=="Dir" {print $4}')"
  : > "$OUT/.stages.tmp"
  for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    { echo "---"; cat "$DIR/kustomize/stage/$f"; } >> "$OUT/.stages.tmp"
  done
  mv "$OUT/.stages.tmp" "$STAGES"
fi
echo "$BIN"
