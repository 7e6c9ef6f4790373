#!/usr/bin/env bash
# The README's first command: build what is missing, bring up the local
# cluster with agent-sandbox installed, claim a sandbox from the warm pool
# with the Python SDK, run Python in it under gVisor and print the output.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}"
started=$(date +%s)
step() { echo "run: [$(( $(date +%s) - started ))s] $*" >&2; }

[ "$(id -u)" -eq 0 ] || { echo "run: the local cluster runs a kubelet and containerd and needs root (fix: sudo make run)" >&2; exit 1; }

step "dependencies (apt packages, Kubernetes, containerd, gVisor; cached after the first run)"
hack/deps.sh
step "images (sandboxd, python-runtime, controller, router)"
go run ./hack/mkimages >/dev/null
step "local cluster with agent-sandbox"
go run ./cmd/agent-sandbox up

step "Python SDK"
VENV="$CACHE/venv-python-sdk"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
# Reinstall only when the SDK's sources changed.
sum="$(find clients/python/pyproject.toml clients/python/k8s_agent_sandbox -type f -name '*.py' -o -name pyproject.toml | sort | xargs sha256sum | sha256sum | cut -c1-16)"
if [ "$(cat "$VENV/.sdk-sum" 2>/dev/null)" != "$sum" ]; then
  "$VENV/bin/pip" install -q --disable-pip-version-check ./clients/python
  echo "$sum" > "$VENV/.sdk-sum"
fi

export KUBECONFIG=/var/lib/agent-sandbox/kubeconfig
export PATH="$(hack/kube/build.sh --print-dir):$PATH"
step "claim a sandbox from python-sandbox-pool and run examples/python-sdk/hello.py"
"$VENV/bin/python" examples/python-sdk/hello.py
step "done; the cluster keeps running (stop it with: go run ./cmd/agent-sandbox down)"
