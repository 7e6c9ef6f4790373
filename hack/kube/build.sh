#!/usr/bin/env bash
# Builds Kubernetes (and etcd) binaries from the Go module proxy into
#   ${AGENT_SANDBOX_CACHE:-~/.cache/agent-sandbox}/bin/<kube-version>/
# and prints that directory. A binary that already exists is not rebuilt, so a
# warm run is a no-op. Usage: build.sh [component...]
# (default: kube-apiserver etcd kubectl kube-controller-manager, what tests need; "all" adds the node and control-plane parts).
set -euo pipefail
cd "$(dirname "$0")"
KUBE_VERSION="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit} $1=="require" && $2=="k8s.io/kubernetes" {print $3; exit}' go.mod)"
CACHE="${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}"
OUT="$CACHE/bin/$KUBE_VERSION"
mkdir -p "$OUT"

if [ "${1:-}" = "--print-dir" ]; then echo "$OUT"; exit 0; fi
components=("$@")
[ ${#components[@]} -eq 0 ] && components=(kube-apiserver etcd kubectl kube-controller-manager)
if [ "${components[0]}" = "all" ]; then
  components=(kube-apiserver etcd kubectl kube-controller-manager kube-scheduler kubelet kube-proxy)
fi

minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
LDFLAGS="-s -w \
 -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=$minor"

for c in "${components[@]}"; do
  if [ -x "$OUT/$c" ]; then continue; fi
  case "$c" in
    etcd) pkg=./cmd/etcd ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kubectl|kube-proxy) pkg="k8s.io/kubernetes/cmd/$c" ;;
    *) echo "build.sh: unknown component '$c'" >&2; exit 2 ;;
  esac
  start=$(date +%s)
  echo "building $c $KUBE_VERSION (first time only; several minutes on 2 cores)..." >&2
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="$LDFLAGS" -o "$OUT/.$c.tmp" "$pkg"
  mv "$OUT/.$c.tmp" "$OUT/$c"
  echo "built $c in $(( $(date +%s) - start ))s" >&2
done
echo "$OUT"
