package router

import (
	"net/http"
	"strings"
)

// isUpgrade reports a protocol-upgrade request (WebSocket and friends):
// Connection lists the "upgrade" token and Upgrade is non-empty. Upgraded
// connections are exempt from the proxy timeout and lose their Origin header
// (see rewrite).
func isUpgrade(r *http.Request) bool {
	if r.Header.Get("Upgrade") == "" {
		return false
	}
	return headerHasToken(r.Header["Connection"], "upgrade")
}

// isGRPC reports a gRPC call: HTTP/2 with an application/grpc content type.
// gRPC is forwarded over h2c and, like upgrades, is not cut by the proxy
// timeout, because its streams are long-lived sessions with their own
// deadlines (grpc-timeout).
func isGRPC(r *http.Request) bool {
	return r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc")
}

// headerHasToken reports whether a comma-separated header lists token
// (case-insensitive).
func headerHasToken(values []string, token string) bool {
	for _, v := range values {
		for v != "" {
			var t string
			t, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
