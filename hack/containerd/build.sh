#!/usr/bin/env bash
# Builds containerd, containerd-shim-runc-v2 and ctr from the Go module proxy into
#   ${AGENT_SANDBOX_CACHE:-~/.cache/agent-sandbox}/bin/containerd-<version>/
# and prints that directory. The version is the one pinned in this directory's
# go.mod. A binary that already exists is not rebuilt, so a warm run is a no-op.
# CGO_ENABLED=0 with the btrfs/devmapper/zfs snapshotters left out: the local
# cluster only uses overlayfs, and a static binary needs no C toolchain.
set -euo pipefail
cd "$(dirname "$0")"
VERSION="$(awk '$1=="require" && $2=="github.com/containerd/containerd/v2" {print $3; exit} $1=="github.com/containerd/containerd/v2" {print $2; exit}' go.mod)"
CACHE="${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}"
OUT="$CACHE/bin/containerd-$VERSION"
mkdir -p "$OUT"

for c in containerd containerd-shim-runc-v2 ctr; do
  if [ -x "$OUT/$c" ]; then continue; fi
  start=$(date +%s)
  echo "building $c $VERSION (first time only; a few minutes on 2 cores)..." >&2
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -tags no_btrfs,no_devmapper,no_zfs \
    -ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$VERSION" \
    -o "$OUT/.$c.tmp" "github.com/containerd/containerd/v2/cmd/$c"
  mv "$OUT/.$c.tmp" "$OUT/$c"
  echo "built $c in $(( $(date +%s) - start ))s" >&2
done
echo "$OUT"
