// Command agent-sandbox is the project's CLI: it runs a local Kubernetes
// cluster with gVisor sandboxes (`up`, `down`, `status`), works with
// sandboxes on any cluster (`create`, `ls`, `exec`, `cp`, `suspend`,
// `resume`, `rm`, `logs`), serves them to agent frameworks as an MCP
// server (`mcp`) and benchmarks claims (`bench`). Installed or symlinked
// as kubectl-sandbox it is the kubectl plugin `kubectl sandbox`
// (hack/install-kubectl-plugin.sh). All logic lives in internal/cli.
package main

import (
	"os"

	"sigs.k8s.io/agent-sandbox/internal/cli"
)

func main() {
	os.Exit(cli.Execute())
}
