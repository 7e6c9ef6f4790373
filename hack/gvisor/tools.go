//go:build tools

// Package tools pins the gVisor commands this module builds: runsc and the
// containerd shim (built from a patched copy, see build.sh).
package tools

import (
	_ "gvisor.dev/gvisor/runsc"
	_ "gvisor.dev/gvisor/shim"
)
