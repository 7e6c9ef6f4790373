// Command etcd is the etcd server, built from the same etcd module version
// that the pinned Kubernetes release uses, so tests and the local cluster run
// against a matching storage backend without any download site.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
