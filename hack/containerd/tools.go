//go:build tools

// Package tools pins the containerd commands this module builds: the daemon,
// the runc shim and ctr (used to import locally built image tarballs).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
