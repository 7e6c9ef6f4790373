//go:build tools

// Package tools pins the one kwok command this module builds: the kwok
// controller, which simulates nodes and pod lifecycles against any apiserver.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
