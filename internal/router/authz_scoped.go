package router

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// MinScopedTokenSecretLen is the shortest accepted HMAC secret (bytes,
// after trimming whitespace).
const MinScopedTokenSecretLen = 32

const (
	scopedTokenVersion = "v1"
	// scopedTokenDomain separates this MAC from any other use of the secret.
	scopedTokenDomain = "agent-sandbox/scoped-token/v1."
)

var b64 = base64.RawURLEncoding

type scopedClaims struct {
	Namespace string `json:"ns"`
	Name      string `json:"name"`
	Expiry    int64  `json:"exp"`
}

// normalizeSecret trims surrounding whitespace (secrets mounted from files
// usually end in a newline) and copies, so callers cannot mutate it later.
func normalizeSecret(secret []byte) ([]byte, error) {
	s := bytes.Clone(bytes.TrimSpace(secret))
	if len(s) < MinScopedTokenSecretLen {
		return nil, fmt.Errorf("scoped-token secret must be at least %d bytes, got %d", MinScopedTokenSecretLen, len(s))
	}
	return s, nil
}

func scopedMAC(secret []byte, payload string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(scopedTokenDomain))
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// MintScopedToken returns a token that lets its bearer reach exactly one
// sandbox until now+ttl (truncated to whole seconds).
func MintScopedToken(secret []byte, namespace, name string, ttl time.Duration) (string, error) {
	s, err := normalizeSecret(secret)
	if err != nil {
		return "", err
	}
	if namespace == "" || name == "" {
		return "", errors.New("scoped token needs a namespace and a name")
	}
	if ttl < time.Second {
		return "", fmt.Errorf("scoped token TTL must be at least 1s, got %s", ttl)
	}
	// Truncating now+ttl (ttl >= 1s) to seconds still lands after the
	// current second, so a fresh token is never born expired.
	exp := time.Now().Add(ttl).Unix()
	raw, err := json.Marshal(scopedClaims{Namespace: namespace, Name: name, Expiry: exp})
	if err != nil {
		return "", fmt.Errorf("encoding claims: %w", err)
	}
	payload := b64.EncodeToString(raw)
	return scopedTokenVersion + "." + payload + "." + b64.EncodeToString(scopedMAC(s, payload)), nil
}

// ScopedTokenAuthorizer admits requests carrying a scoped token for the
// routed sandbox.
type ScopedTokenAuthorizer struct {
	secret []byte
	now    func() time.Time
}

// NewScopedTokenAuthorizer validates and copies the secret.
func NewScopedTokenAuthorizer(secret []byte) (*ScopedTokenAuthorizer, error) {
	s, err := normalizeSecret(secret)
	if err != nil {
		return nil, err
	}
	return &ScopedTokenAuthorizer{secret: s, now: time.Now}, nil
}

// LoadScopedTokenSecret reads the secret file.
func LoadScopedTokenSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading scoped-token secret: %w", err)
	}
	return b, nil
}

// Authorize implements Authorizer. Token problems are 401; a valid token
// used for another sandbox, or together with headers that could steer the
// dial away from the authorised name, is 403.
func (a *ScopedTokenAuthorizer) Authorize(_ context.Context, r *http.Request, namespace, name string) error {
	c, ok := a.verify(BearerToken(r))
	if !ok {
		return ErrUnauthenticated
	}
	if len(r.Header[HeaderSandboxPodIP]) > 0 || len(r.Header[HeaderSandboxUID]) > 0 {
		return ErrForbidden
	}
	if c.Namespace != namespace || c.Name != name {
		return ErrForbidden
	}
	return nil
}

func (a *ScopedTokenAuthorizer) verify(token string) (scopedClaims, bool) {
	var c scopedClaims
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] != scopedTokenVersion {
		return c, false
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sig, scopedMAC(a.secret, parts[1])) {
		return c, false
	}
	raw, err := b64.DecodeString(parts[1])
	if err != nil || json.Unmarshal(raw, &c) != nil || c.Namespace == "" || c.Name == "" {
		return c, false
	}
	if a.now().Unix() >= c.Expiry {
		return c, false
	}
	return c, true
}
