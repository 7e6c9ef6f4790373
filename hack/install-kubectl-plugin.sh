#!/usr/bin/env bash
# Install agent-sandbox as the kubectl plugin `kubectl sandbox`.
#
#   hack/install-kubectl-plugin.sh [BINDIR]
#
# Builds ./cmd/agent-sandbox into BINDIR (default: $GOBIN, else
# $(go env GOPATH)/bin), symlinks kubectl-sandbox to it (the binary
# presents itself as `kubectl sandbox` under that name), and adds
# kubectl_complete-sandbox, which kubectl (1.26+) runs to complete
# `kubectl sandbox <TAB>`. BINDIR must be on PATH for kubectl to find the
# plugin. Set AGENT_SANDBOX_BIN to link an already built binary instead.
set -euo pipefail

cd "$(dirname "$0")/.."
bindir=${1:-${GOBIN:-$(go env GOPATH)/bin}}
mkdir -p "$bindir"
bindir=$(cd "$bindir" && pwd)

bin=${AGENT_SANDBOX_BIN:-}
if [[ -z $bin ]]; then
	bin=$bindir/agent-sandbox
	go build -o "$bin" ./cmd/agent-sandbox
fi
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")

ln -sf "$bin" "$bindir/kubectl-sandbox"
cat >"$bindir/kubectl_complete-sandbox" <<EOS
#!/bin/sh
# Shell completion of \`kubectl sandbox\`, called by kubectl.
exec "$bindir/kubectl-sandbox" __complete "\$@"
EOS
chmod +x "$bindir/kubectl_complete-sandbox"

echo "installed: $bindir/kubectl-sandbox -> $bin"
case ":$PATH:" in
*":$bindir:"*) echo "try: kubectl sandbox ls" ;;
*) echo "add $bindir to PATH, then try: kubectl sandbox ls" ;;
esac
