package router

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"strings"
)

// Sentinel authorization errors. Authorizers may wrap them; the handler maps
// ErrUnauthenticated to 401, ErrForbidden to 403 and anything else to 500.
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
)

// Authorizer decides whether a request may reach a sandbox. It is called
// exactly once per proxied request, after header validation and before
// resolution, so a refused caller learns nothing about the sandbox.
type Authorizer interface {
	Authorize(ctx context.Context, r *http.Request, namespace, name string) error
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(ctx context.Context, r *http.Request, namespace, name string) error

// Authorize implements Authorizer.
func (f AuthorizerFunc) Authorize(ctx context.Context, r *http.Request, namespace, name string) error {
	return f(ctx, r, namespace, name)
}

// AllowAll admits every request. Under it, the cache-backed resolution and
// address policy are the only SSRF defences, which is why resolution never
// dials anything the cache cannot tie to the named sandbox.
type AllowAll struct{}

// Authorize implements Authorizer.
func (AllowAll) Authorize(context.Context, *http.Request, string, string) error { return nil }

// authzStatus maps an authorizer error to its HTTP status.
func authzStatus(err error) int {
	switch {
	case errors.Is(err, ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}

// BearerToken returns the token of an "Authorization: Bearer <token>"
// header (scheme case-insensitive, token trimmed), or "" when absent,
// empty or another scheme.
func BearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return ""
	}
	return strings.TrimSpace(h[len(prefix):])
}

// Identity is an authenticated principal, for custom authorizers.
type Identity struct {
	Username string
	UID      string
	Groups   []string
	Extra    map[string][]string
	// Source says where the identity came from ("tls", "tokenreview").
	Source string
}

// Authenticated reports whether the identity names anybody.
func (i Identity) Authenticated() bool {
	return i.Username != "" || i.UID != "" || len(i.Groups) > 0
}

// TLSIdentity derives an identity from the leaf of the first verified client
// chain: username is the first spiffe:// URI SAN, else the first DNS SAN,
// else the subject CN; groups are the subject's O values.
func TLSIdentity(cs *tls.ConnectionState) Identity {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return Identity{}
	}
	leaf := cs.VerifiedChains[0][0]
	id := Identity{Source: "tls", Groups: append([]string(nil), leaf.Subject.Organization...)}
	for _, u := range leaf.URIs {
		if strings.EqualFold(u.Scheme, "spiffe") {
			id.Username = u.String()
			break
		}
	}
	if id.Username == "" && len(leaf.DNSNames) > 0 {
		id.Username = leaf.DNSNames[0]
	}
	if id.Username == "" {
		id.Username = leaf.Subject.CommonName
	}
	return id
}
