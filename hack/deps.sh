#!/usr/bin/env bash
# Installs and builds everything the local cluster (`agent-sandbox up`) needs,
# cached under ${AGENT_SANDBOX_CACHE:-~/.cache/agent-sandbox} and keyed by version:
#   - Debian packages (runc, CNI plugins, iptables, iproute2, ...), only if missing;
#   - Kubernetes v1.37.x + etcd (hack/kube/build.sh all);
#   - containerd v2 + runc shim + ctr (hack/containerd/build.sh);
#   - gVisor runsc + patched containerd-shim-runsc-v1 (hack/gvisor/build.sh);
#   - CoreDNS, kube-router (NetworkPolicy firewall) and local-path-provisioner
#     (hack/coredns, hack/kuberouter, hack/localpath);
#   - the pause binary for the pod sandbox image (internal/localcluster/pause);
#   - the deep-hibernation node agent (cmd/sandbox-hibernate-agent), and the cpu
#     agent (cmd/sandbox-cpu-agent), host processes of the local cluster.
# Nothing is rebuilt when present, so a second run is a fast no-op.
# Usage: hack/deps.sh            (the Makefile's `make deps` runs exactly this)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}"
started=$(date +%s)
step() { echo "deps: [$(( $(date +%s) - started ))s] $*" >&2; }
fail() { echo "deps: error: $*" >&2; exit 1; }

# --- Debian packages ---------------------------------------------------------
# runc/CNI plugins run pods; iptables/iproute2 set up the node network; busybox
# and debootstrap feed the image builders; ipset is driven by kube-router; the
# rest are kubelet/CRI helpers.
PKGS=(runc containernetworking-plugins iptables conntrack socat ethtool busybox-static
      debootstrap openssl iproute2 tmux ipset)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || fail "missing packages ${missing[*]} and no apt-get: install them with your package manager"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || fail "missing packages ${missing[*]}: run hack/deps.sh as root (or install sudo)"
    SUDO=sudo
  fi
  step "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq || fail "apt-get update failed: check the network access to the Debian mirror"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || fail "apt-get install ${missing[*]} failed (see above)"
fi
command -v go >/dev/null || fail "the Go toolchain is not on PATH: install Go >= 1.26"

# --- builds (one at a time: parallel Go builds only thrash 2 cores) ------------
run_build() { # <what> <script> [args...]
  local what=$1; shift
  local out
  out="$("$@")" || fail "building $what failed (see the compiler output above); fix it and rerun hack/deps.sh — finished parts are kept"
  step "$what: $out"
}
run_build "kubernetes + etcd" hack/kube/build.sh all
run_build "containerd" hack/containerd/build.sh
run_build "gvisor" hack/gvisor/build.sh
run_build "coredns" hack/coredns/build.sh
run_build "kube-router" hack/kuberouter/build.sh
run_build "local-path-provisioner" hack/localpath/build.sh

pause="$CACHE/bin/pause/pause"
src=internal/localcluster/pause/main.go
# Rebuilt when its source changes by content (a fresh clone's mtimes are
# all new).
src_sum="$(sha256sum "$src" | cut -d' ' -f1)"
if [ ! -x "$pause" ] || [ "$(cat "$pause.source-sha256" 2>/dev/null)" != "$src_sum" ]; then
  mkdir -p "$(dirname "$pause")"
  CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$pause.tmp" ./internal/localcluster/pause \
    || fail "building the pause binary failed (see above)"
  mv "$pause.tmp" "$pause"
  echo "$src_sum" > "$pause.source-sha256"
fi
step "pause: $pause"

# build_host_agent NAME DIR SOURCE_DIR...: a host process of the local
# cluster, built from ./cmd/NAME into $CACHE/bin/DIR/NAME and rebuilt when
# its sources (cmd/NAME and the SOURCE_DIRs) or the module's dependencies
# (go.sum) change, by content.
build_host_agent() {
  local name="$1" dir="$2"; shift 2
  local bin="$CACHE/bin/$dir/$name" sum srcs=("cmd/$name"/*.go)
  for d in "$@"; do srcs+=("$d"/*.go); done
  sum="$(cat "${srcs[@]}" go.sum | sha256sum | cut -d' ' -f1)"
  if [ ! -x "$bin" ] || [ "$(cat "$bin.source-sha256" 2>/dev/null)" != "$sum" ]; then
    mkdir -p "$(dirname "$bin")"
    CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$bin.tmp" "./cmd/$name" \
      || fail "building $name failed (see above)"
    mv "$bin.tmp" "$bin"
    echo "$sum" > "$bin.source-sha256"
  fi
  step "$name: $bin"
}

# Caches of an earlier layout kept the hibernation agent in a directory
# named like the binary the image builder writes (bin/sandbox-hibernate-agent);
# go build -o would then write into that directory and the image build fail.
if [ -d "$CACHE/bin/sandbox-hibernate-agent" ]; then
  rm -rf "$CACHE/bin/sandbox-hibernate-agent"
fi
build_host_agent sandbox-hibernate-agent hibernate-agent internal/hibernate
# The node's cpu agent gives the controller's Pod the real-time class
# (internal/localcluster/cpuagent.go).
build_host_agent sandbox-cpu-agent cpu-agent internal/cpuclass
step "done"
