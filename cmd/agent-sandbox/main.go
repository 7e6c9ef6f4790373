// Command agent-sandbox is the project's CLI: it runs a local Kubernetes
// cluster with gVisor sandboxes (`up`, `down`, `status`) and works with
// sandboxes on any cluster. All logic lives in internal/cli.
package main

import (
	"os"

	"github.com/agent-sandbox/agent-sandbox/internal/cli"
)

func main() {
	os.Exit(cli.Execute())
}
