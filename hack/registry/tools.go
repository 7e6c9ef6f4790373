//go:build tools

// Package tools pins the registry's module in go.mod.
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
