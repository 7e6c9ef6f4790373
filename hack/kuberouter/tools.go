//go:build tools

// Package tools pins kube-router, run by the local cluster in firewall-only
// mode as its NetworkPolicy engine.
package tools

import (
	_ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
)
