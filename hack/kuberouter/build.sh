#!/usr/bin/env bash
# Builds kube-router (the local cluster runs only its NetworkPolicy firewall)
# into ${AGENT_SANDBOX_CACHE:-~/.cache/agent-sandbox}/bin/kube-router-<version>/
# and prints that directory. The version is pinned in this directory's go.mod.
# CGO_ENABLED=0: it drives iptables and ipset through their binaries and
# netlink through pure-Go packages, so a static binary needs no C toolchain.
set -euo pipefail
cd "$(dirname "$0")"
MOD=github.com/cloudnativelabs/kube-router/v2
VERSION="$(awk -v m="$MOD" '$1=="require" && $2==m {print $3; exit} $1==m {print $2; exit}' go.mod)"
CACHE="${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}"
OUT="$CACHE/bin/kube-router-$VERSION"
mkdir -p "$OUT"
if [ ! -x "$OUT/kube-router" ]; then
  start=$(date +%s)
  echo "building kube-router $VERSION (first time only; a few minutes on 2 cores)..." >&2
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
    -ldflags="-s -w -X $MOD/pkg/version.Version=$VERSION" -o "$OUT/.kube-router.tmp" "$MOD/cmd/kube-router"
  mv "$OUT/.kube-router.tmp" "$OUT/kube-router"
  echo "built kube-router in $(( $(date +%s) - start ))s" >&2
fi
echo "$OUT"
