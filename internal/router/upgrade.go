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

// grpcStatusHeaders are the fields gRPC sends in trailers, or, in a
// "Trailers-Only" response (an error before any message), in the one
// HEADERS frame that also ends the stream.
var grpcStatusHeaders = []string{"Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin"}

// trailersOnlyToTrailers moves the status of a Trailers-Only gRPC response
// into declared trailers. ReverseProxy flushes the response headers as soon
// as it starts copying (FlushInterval -1), which can put them on the wire in
// a HEADERS frame that does not end the stream; the client then reads the
// status as ordinary headers and fails the call with "server closed the
// stream without sending trailers". As trailers the status arrives in the
// final frame whatever the timing.
func trailersOnlyToTrailers(res *http.Response) {
	if res.Header.Get("Grpc-Status") == "" || len(res.Trailer) > 0 {
		return
	}
	res.Trailer = http.Header{}
	for _, k := range grpcStatusHeaders {
		if v, ok := res.Header[k]; ok {
			res.Trailer[k] = v
			delete(res.Header, k)
		}
	}
}
