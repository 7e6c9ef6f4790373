// Command coredns is CoreDNS with only the plugins the local cluster's
// Corefile uses. Selecting plugins at compile time (instead of importing
// core/plugin, which links every plugin and its cloud SDKs) keeps the binary
// and its build small; CoreDNS documents this way of building it.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
