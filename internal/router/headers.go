package router

import (
	"net/http"
	"net/netip"
)

// Routing headers, in Go canonical form. The wire names used by the SDKs are
// X-Sandbox-ID, X-Sandbox-Namespace, X-Sandbox-Port, X-Sandbox-Pod-IP and
// X-Sandbox-UID; net/http canonicalises them to these keys.
const (
	HeaderSandboxID        = "X-Sandbox-Id"
	HeaderSandboxUID       = "X-Sandbox-Uid"
	HeaderSandboxNamespace = "X-Sandbox-Namespace"
	HeaderSandboxPort      = "X-Sandbox-Port"
	HeaderSandboxPodIP     = "X-Sandbox-Pod-Ip"
)

// Defaults applied when the optional headers are absent (same as upstream).
const (
	DefaultNamespace = "default"
	DefaultPort      = 8888
)

// Client-visible validation messages. They are part of the wire contract:
// SDK tests and users match on them.
const (
	msgIDRequired       = "X-Sandbox-ID header is required."
	msgInvalidID        = "Invalid sandbox ID format."
	msgInvalidNamespace = "Invalid namespace format."
	msgInvalidPort      = "Invalid port format."
	msgInvalidIP        = "Invalid target IP address."
)

// Route is the validated routing request carried by one HTTP request.
type Route struct {
	ID        string
	Namespace string
	Port      uint16
	// PodIP is the client's hint; the zero Addr when absent. It is never
	// dialled as such: resolution must find it among the sandbox's addresses.
	PodIP netip.Addr
	// UID, when set, pins the request to one incarnation of the Sandbox.
	UID string
}

// Key returns the cache key of the routed sandbox.
func (r Route) Key() SandboxKey { return SandboxKey{Namespace: r.Namespace, Name: r.ID} }

// ParseRoute validates the routing headers in the upstream order (ID,
// namespace, port, pod IP) and returns the first failure as a 400.
//
// Beyond upstream, a routing header that appears more than once is refused:
// net/http merges differently-cased duplicates into one key, and accepting
// the first value while a downstream component reads another is a classic
// smuggling vector.
func ParseRoute(h http.Header, allowLoopback bool) (Route, *httpError) {
	var r Route
	id, dup := single(h, HeaderSandboxID)
	if dup {
		return r, errorf(http.StatusBadRequest, "Multiple X-Sandbox-ID headers are not allowed.")
	}
	if id == "" {
		return r, errorf(http.StatusBadRequest, msgIDRequired)
	}
	if !isDNSLabel(id) {
		return r, errorf(http.StatusBadRequest, msgInvalidID)
	}
	r.ID = id

	ns, dup := single(h, HeaderSandboxNamespace)
	if dup {
		return r, errorf(http.StatusBadRequest, "Multiple X-Sandbox-Namespace headers are not allowed.")
	}
	if ns == "" {
		ns = DefaultNamespace
	} else if !isDNSLabel(ns) {
		return r, errorf(http.StatusBadRequest, msgInvalidNamespace)
	}
	r.Namespace = ns

	port, dup := single(h, HeaderSandboxPort)
	if dup {
		return r, errorf(http.StatusBadRequest, "Multiple X-Sandbox-Port headers are not allowed.")
	}
	if port == "" {
		r.Port = DefaultPort
	} else {
		p, ok := parsePort(port)
		if !ok {
			return r, errorf(http.StatusBadRequest, msgInvalidPort)
		}
		r.Port = p
	}

	ip, dup := single(h, HeaderSandboxPodIP)
	if dup {
		return r, errorf(http.StatusBadRequest, "Multiple X-Sandbox-Pod-IP headers are not allowed.")
	}
	if ip != "" {
		a, ok := ParsePodIP(ip, allowLoopback)
		if !ok {
			// Same message for "not an IP" and "forbidden class" on purpose:
			// a prober learns nothing about which classes are filtered.
			return r, errorf(http.StatusBadRequest, msgInvalidIP)
		}
		r.PodIP = a
	}

	uid, dup := single(h, HeaderSandboxUID)
	if dup {
		return r, errorf(http.StatusBadRequest, "Multiple X-Sandbox-UID headers are not allowed.")
	}
	r.UID = uid
	return r, nil
}

// single returns the only value of key and whether the header was repeated.
func single(h http.Header, key string) (string, bool) {
	v := h[key]
	switch len(v) {
	case 0:
		return "", false
	case 1:
		return v[0], false
	default:
		return "", true
	}
}

// isDNSLabel reports whether s is an RFC 1123 label as Kubernetes uses it
// for names and namespaces: 1-63 of [a-z0-9-], alphanumeric at both ends.
// Hand-written rather than a regexp because it runs on every request.
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i != 0 && i != len(s)-1:
		default:
			return false
		}
	}
	return true
}

// parsePort accepts only plain decimal digits in [1, 65535]: no sign, no
// spaces, no hex, at most five digits.
func parsePort(s string) (uint16, bool) {
	if len(s) == 0 || len(s) > 5 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n < 1 || n > 65535 {
		return 0, false
	}
	return uint16(n), true
}
