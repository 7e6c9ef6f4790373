#!/usr/bin/env bash
# Builds gVisor's runsc and containerd-shim-runsc-v1 from the Go module proxy into
#   ${AGENT_SANDBOX_CACHE:-~/.cache/agent-sandbox}/bin/gvisor-<version>/
# and prints that directory. A binary that already exists is not rebuilt.
#
# The version is pinned in go.mod. It was resolved once with
#   go list -m gvisor.dev/gvisor@latest
# because the proxy refuses the "go" branch query (@go) that gVisor documents.
#
# Why a patched copy: the shim calls SetOOMScore(-999) on itself and treats a
# failure as fatal. Root without CAP_SYS_RESOURCE (common in VMs and nested
# containers) cannot lower oom_score_adj, so every gVisor pod would fail to
# start. The patch ignores that error. It must not print anything: containerd
# parses the shim's start output, and any extra line breaks the handshake.
set -euo pipefail
cd "$(dirname "$0")"
VERSION="$(awk '$1=="require" && $2=="gvisor.dev/gvisor" {print $3; exit} $1=="gvisor.dev/gvisor" {print $2; exit}' go.mod)"
PATCH_REV=oomscore1 # bump when the patch below changes
CACHE="${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}"
OUT="$CACHE/bin/gvisor-$VERSION"
SRC="$CACHE/src/gvisor-$VERSION-$PATCH_REV"
WORK="$CACHE/build/gvisor-$VERSION-$PATCH_REV"
mkdir -p "$OUT"

# The hibernation shim is this repository's code: rebuilt when its sources
# change, by content (the upstream binaries are keyed by VERSION alone).
shim_sum="$(cat $(find hibernateshim -name '*.go' | sort) go.sum | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$OUT/containerd-shim-runsc-hibernate-v1.source-sha256" 2>/dev/null)" != "$shim_sum" ]; then
  rm -f "$OUT/containerd-shim-runsc-hibernate-v1"
fi

if [ -x "$OUT/runsc" ] && [ -x "$OUT/containerd-shim-runsc-v1" ] && [ -x "$OUT/containerd-shim-runsc-hibernate-v1" ]; then
  echo "$OUT"
  exit 0
fi

export GOFLAGS=-mod=mod
if [ ! -f "$SRC/.patched" ]; then
  echo "preparing patched gvisor.dev/gvisor@$VERSION in $SRC" >&2
  orig="$(go mod download -json "gvisor.dev/gvisor@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -d "$orig" ] || { echo "gvisor/build.sh: cannot download gvisor.dev/gvisor@$VERSION" >&2; exit 1; }
  rm -rf "$SRC" && mkdir -p "$(dirname "$SRC")"
  cp -r "$orig" "$SRC" && chmod -R u+w "$SRC"
  f="$SRC/pkg/shim/v1/manager.go"
  perl -0pi -e 's/(\tif err := sys\.SetOOMScore\(cmd\.Process\.Pid, oomScoreMax\); err != nil \{\n)\t\treturn shim\.BootstrapParams\{\}, fmt\.Errorf\("failed to set OOM Score on shim: %w", err\)\n/$1\t\t_ = err \/\/ agent-sandbox: no CAP_SYS_RESOURCE; not fatal, and silent (start output is parsed)\n/' "$f"
  grep -q 'agent-sandbox: no CAP_SYS_RESOURCE' "$f" || {
    echo "gvisor/build.sh: the SetOOMScore patch no longer applies to $f; update the patch for $VERSION" >&2; exit 1; }
  touch "$SRC/.patched"
fi

# Build with a generated go.mod that adds the replace, so the checked-in go.mod
# stays machine-independent (the cache path differs per user).
mkdir -p "$WORK"
cp go.mod "$WORK/go.mod" && cp go.sum "$WORK/go.sum"
go mod edit -modfile="$WORK/go.mod" -replace "gvisor.dev/gvisor=$SRC"

build() { # <output name> <package>
  [ -x "$OUT/$1" ] && return 0
  local start; start=$(date +%s)
  echo "building $1 $VERSION (first time only; a few minutes on 2 cores)..." >&2
  CGO_ENABLED=0 go build -modfile="$WORK/go.mod" -trimpath -ldflags='-s -w' -o "$OUT/.$1.tmp" "$2"
  mv "$OUT/.$1.tmp" "$OUT/$1"
  echo "built $1 in $(( $(date +%s) - start ))s" >&2
}
build runsc gvisor.dev/gvisor/runsc
build containerd-shim-runsc-v1 gvisor.dev/gvisor/shim
# The same shim plus the deep-hibernation restore extension (hibernateshim/).
build containerd-shim-runsc-hibernate-v1 ./hibernateshim
echo "$shim_sum" > "$OUT/containerd-shim-runsc-hibernate-v1.source-sha256"
echo "$OUT"
