// Package router implements sandbox-router, the HTTP entry point that turns
// routing headers (X-Sandbox-ID, X-Sandbox-Namespace, X-Sandbox-Port, ...)
// into a connection to one sandbox pod.
//
// The package owns the whole data path: header validation and the
// {"detail": ...} error contract (headers.go, errors.go), target resolution
// from an informer cache of Sandboxes and their Pods (index.go, informer.go,
// resolve.go), the address policy that keeps metadata, loopback, link-local,
// foreign pods and the router itself unreachable (addrpolicy.go), streaming
// forwarding with WebSocket and h2c/gRPC pass-through (proxy.go,
// transport.go, upgrade.go), authorization (authz*.go), transparent resume of
// suspended sandboxes (resume.go), idle tracking and auto-suspend (idle.go),
// Prometheus metrics (metrics.go), TLS (tls.go) and the listeners, probes and
// graceful shutdown (server.go). Configuration parsing lives in config.go so
// that cmd/sandbox-router stays a thin main.
//
// Unlike the upstream router, this one never dials an address it cannot tie
// to the named Sandbox's current pod: a client-supplied X-Sandbox-Pod-IP is
// only a hint that must agree with the cache, and there is no DNS fallback.
package router
