//go:build tools

// Package tools pins rancher's local-path-provisioner, the local cluster's
// dynamic provisioner behind the default StorageClass.
package tools

import (
	_ "github.com/rancher/local-path-provisioner"
)
