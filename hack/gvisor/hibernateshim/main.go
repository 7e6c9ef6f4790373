// Binary containerd-shim-runsc-hibernate-v1 is gVisor's containerd shim plus
// one extension: a Pod that carries the restore annotation (set only by the
// agent-sandbox controller, enforced by admission) is restored from a gVisor
// checkpoint instead of being started fresh. Everything else is the stock
// shim. It lives in this module because it links gVisor (see build.sh).
package main

import (
	"gvisor.dev/gvisor/pkg/shim/v1/extension"
	"gvisor.dev/gvisor/shim/v1/cli"

	"sigs.k8s.io/agent-sandbox/hack/gvisor/hibernateshim/restore"
)

func main() {
	extension.NewExtension = restore.NewExtension
	cli.Main()
}
