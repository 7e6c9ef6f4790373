package router

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func bearerReq(auth string, kv ...string) *http.Request {
	r, _ := http.NewRequest("GET", "http://x/", nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	for i := 0; i < len(kv); i += 2 {
		r.Header.Set(kv[i], kv[i+1])
	}
	return r
}

func TestBearerToken(t *testing.T) {
	for in, want := range map[string]string{
		"Bearer abc":    "abc",
		"bearer abc":    "abc",
		"BEARER   abc ": "abc",
		"Basic abc":     "",
		"Bearer ":       "",
		"Bearer":        "",
		"":              "",
		"Bearerabc":     "",
	} {
		if got := BearerToken(bearerReq(in)); got != want {
			t.Errorf("BearerToken(%q) = %q want %q", in, got, want)
		}
	}
}

func TestTLSIdentity(t *testing.T) {
	spiffe, _ := url.Parse("spiffe://cluster.local/ns/a/sa/b")
	other, _ := url.Parse("https://example.com/x")
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "cn", Organization: []string{"g1", "g2"}},
		DNSNames: []string{"dns.example"}, URIs: []*url.URL{other, spiffe}}
	cs := &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
	id := TLSIdentity(cs)
	if id.Username != spiffe.String() || len(id.Groups) != 2 || id.Source != "tls" || !id.Authenticated() {
		t.Fatalf("spiffe first: %+v", id)
	}
	cert.URIs = []*url.URL{other}
	if id := TLSIdentity(cs); id.Username != "dns.example" {
		t.Fatalf("dns next (non-spiffe URIs ignored): %+v", id)
	}
	cert.DNSNames = nil
	if id := TLSIdentity(cs); id.Username != "cn" {
		t.Fatalf("CN last: %+v", id)
	}
	if TLSIdentity(&tls.ConnectionState{}).Authenticated() {
		t.Fatal("no verified chain is anonymous")
	}
}

type fakeReviewer struct {
	mu        sync.Mutex
	calls     int
	audiences []string
	result    map[string]bool
	err       error
}

func (f *fakeReviewer) Create(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.audiences = tr.Spec.Audiences
	if f.err != nil {
		return nil, f.err
	}
	out := tr.DeepCopy()
	out.Status.Authenticated = f.result[tr.Spec.Token]
	return out, nil
}

func TestTokenReviewAuthorizer(t *testing.T) {
	rev := &fakeReviewer{result: map[string]bool{"good": true}}
	a, err := NewTokenReviewAuthorizer(rev, TokenReviewOptions{TTL: time.Minute, CacheSize: 8, Audiences: []string{"router"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		if err := a.Authorize(ctx, bearerReq("Bearer good"), "ns", "n"); err != nil {
			t.Fatalf("good token: %v", err)
		}
		if err := a.Authorize(ctx, bearerReq("Bearer bad"), "ns", "n"); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("bad token: %v", err)
		}
	}
	if rev.calls != 2 {
		t.Fatalf("%d API calls; positive and negative results must be cached", rev.calls)
	}
	if len(rev.audiences) != 1 || rev.audiences[0] != "router" {
		t.Fatalf("audiences %v", rev.audiences)
	}
	if err := a.Authorize(ctx, bearerReq(""), "ns", "n"); err != nil {
		t.Fatalf("no token, not required: %v", err)
	}
	req, _ := NewTokenReviewAuthorizer(rev, TokenReviewOptions{TTL: time.Minute, CacheSize: 8, RequireToken: true})
	if err := req.Authorize(ctx, bearerReq(""), "ns", "n"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("no token, required: %v", err)
	}
	// Expiry: after the TTL the token is reviewed again.
	now := time.Now()
	a.now = func() time.Time { return now.Add(2 * time.Minute) }
	_ = a.Authorize(ctx, bearerReq("Bearer good"), "ns", "n")
	if rev.calls != 3 {
		t.Fatalf("expired entry not refreshed: %d calls", rev.calls)
	}
	// API failure surfaces as a non-sentinel error (500) and is cached briefly.
	failing := &fakeReviewer{err: errors.New("apiserver down")}
	f, _ := NewTokenReviewAuthorizer(failing, TokenReviewOptions{TTL: time.Minute, CacheSize: 8})
	for range 2 {
		err := f.Authorize(ctx, bearerReq("Bearer x"), "ns", "n")
		if err == nil || errors.Is(err, ErrUnauthenticated) || !strings.HasPrefix(err.Error(), "tokenreview: ") {
			t.Fatalf("api failure: %v", err)
		}
	}
	if failing.calls != 1 {
		t.Fatalf("error not cached: %d calls", failing.calls)
	}
	if _, err := NewTokenReviewAuthorizer(rev, TokenReviewOptions{TTL: -1, CacheSize: 8}); err == nil {
		t.Fatal("negative TTL accepted")
	}
	if _, err := NewTokenReviewAuthorizer(rev, TokenReviewOptions{TTL: time.Second, CacheSize: -1}); err == nil {
		t.Fatal("negative cache size accepted")
	}
	// Two calls on the same token must agree (the hash is the cache key).
	first, again := TokenHash("abc"), TokenHash("abc")
	if first != again || len(first) != 64 || first == TokenHash("abd") {
		t.Fatal("token hash")
	}
}

func TestLRUEviction(t *testing.T) {
	c := newLRU[reviewResult](2)
	exp := time.Now().Add(time.Hour)
	c.put("a", reviewResult{authenticated: true}, exp)
	c.put("b", reviewResult{}, exp)
	c.get("a", time.Now())
	c.put("c", reviewResult{}, exp)
	if _, ok := c.get("b", time.Now()); ok {
		t.Fatal("least recently used entry not evicted")
	}
	if _, ok := c.get("a", time.Now()); !ok {
		t.Fatal("recently used entry evicted")
	}
}

func TestScopedToken(t *testing.T) {
	secret := []byte("  " + strings.Repeat("k", 32) + "\n")
	a, err := NewScopedTokenAuthorizer(secret)
	if err != nil {
		t.Fatal(err)
	}
	secret[5] = 'X' // the authorizer copied the (trimmed) secret
	tok, err := MintScopedToken([]byte(strings.Repeat("k", 32)), "ns", "sb", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, "v1.") {
		t.Fatalf("token %q", tok)
	}
	ctx := context.Background()
	check := func(name string, r *http.Request, ns, sb string, want error) {
		t.Helper()
		err := a.Authorize(ctx, r, ns, sb)
		if (want == nil) != (err == nil) || (want != nil && !errors.Is(err, want)) {
			t.Errorf("%s: got %v want %v", name, err, want)
		}
	}
	check("own sandbox", bearerReq("Bearer "+tok), "ns", "sb", nil)
	check("other name", bearerReq("Bearer "+tok), "ns", "other", ErrForbidden)
	check("other namespace", bearerReq("Bearer "+tok), "ns2", "sb", ErrForbidden)
	check("pod-ip header", bearerReq("Bearer "+tok, "X-Sandbox-Pod-IP", "10.0.0.1"), "ns", "sb", ErrForbidden)
	check("uid header", bearerReq("Bearer "+tok, "X-Sandbox-UID", "u"), "ns", "sb", ErrForbidden)
	check("missing bearer", bearerReq(""), "ns", "sb", ErrUnauthenticated)
	check("malformed", bearerReq("Bearer v1.abc"), "ns", "sb", ErrUnauthenticated)
	check("unversioned", bearerReq("Bearer "+strings.TrimPrefix(tok, "v1.")), "ns", "sb", ErrUnauthenticated)
	check("other version", bearerReq("Bearer v2."+strings.TrimPrefix(tok, "v1.")), "ns", "sb", ErrUnauthenticated)
	wrong, _ := MintScopedToken([]byte(strings.Repeat("w", 32)), "ns", "sb", time.Hour)
	check("wrong secret", bearerReq("Bearer "+wrong), "ns", "sb", ErrUnauthenticated)

	// Expiry: now >= exp is expired, exactly-at-exp included.
	parts := strings.Split(tok, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var c scopedClaims
	_ = json.Unmarshal(raw, &c)
	a.now = func() time.Time { return time.Unix(c.Expiry, 0) }
	check("exactly at exp", bearerReq("Bearer "+tok), "ns", "sb", ErrUnauthenticated)
	a.now = func() time.Time { return time.Unix(c.Expiry-1, 0) }
	check("just before exp", bearerReq("Bearer "+tok), "ns", "sb", nil)
	a.now = time.Now

	short, _ := MintScopedToken([]byte(strings.Repeat("k", 32)), "ns", "sb", time.Second)
	check("1s token not born expired", bearerReq("Bearer "+short), "ns", "sb", nil)

	// The MAC is domain-separated: a plain HMAC of the payload is not valid.
	if string(scopedMAC([]byte("k"), "p")) == string(hmacPlain([]byte("k"), "p")) {
		t.Fatal("MAC not domain separated")
	}
	for _, bad := range []struct {
		secret   string
		ns, name string
		ttl      time.Duration
	}{
		{"short", "ns", "sb", time.Hour},
		{strings.Repeat("k", 32), "", "sb", time.Hour},
		{strings.Repeat("k", 32), "ns", "", time.Hour},
		{strings.Repeat("k", 32), "ns", "sb", 500 * time.Millisecond},
	} {
		if _, err := MintScopedToken([]byte(bad.secret), bad.ns, bad.name, bad.ttl); err == nil {
			t.Errorf("mint accepted %+v", bad)
		}
	}
	if _, err := NewScopedTokenAuthorizer([]byte(strings.Repeat("k", 31) + "   ")); err == nil {
		t.Fatal("short secret accepted")
	}
}

func hmacPlain(secret []byte, payload string) []byte {
	m := hmacNew(secret)
	_, _ = m.Write([]byte(payload)) // a hash.Hash never returns an error
	return m.Sum(nil)
}

func hmacNew(secret []byte) interface {
	Write([]byte) (int, error)
	Sum([]byte) []byte
} {
	return hmac.New(sha256.New, secret)
}

type fakeAccessReviewer struct {
	mu    sync.Mutex
	calls int
	last  authzv1.SubjectAccessReviewSpec
	allow func(spec authzv1.SubjectAccessReviewSpec) bool
}

func (f *fakeAccessReviewer) Create(_ context.Context, sar *authzv1.SubjectAccessReview, _ metav1.CreateOptions) (*authzv1.SubjectAccessReview, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.last = sar.Spec
	out := sar.DeepCopy()
	out.Status.Allowed = f.allow(sar.Spec)
	return out, nil
}

// TestAccessReviewAuthorizer: an authenticated caller is authorized per
// sandbox with a SubjectAccessReview carrying its TokenReview identity;
// allows and denies are cached (denies shorter), per credential and sandbox.
func TestAccessReviewAuthorizer(t *testing.T) {
	rev := &userReviewer{users: map[string]authnv1.UserInfo{
		"alice": {Username: "system:serviceaccount:a:default", UID: "ua", Groups: []string{"system:serviceaccounts"},
			Extra: map[string]authnv1.ExtraValue{"k": {"v"}}},
		"bob": {Username: "system:serviceaccount:b:default", UID: "ub"},
	}}
	sar := &fakeAccessReviewer{allow: func(s authzv1.SubjectAccessReviewSpec) bool {
		ra := s.ResourceAttributes
		return s.User == "system:serviceaccount:a:default" && ra.Namespace == "a" &&
			ra.Group == "agents.x-k8s.io" && ra.Resource == "sandboxes" && ra.Verb == "connect"
	}}
	a, err := NewTokenReviewAuthorizer(rev, TokenReviewOptions{TTL: time.Minute, CacheSize: 8,
		Access: &AccessReviewOptions{Reviewer: sar, TTL: 10 * time.Second, NegativeTTL: 2 * time.Second, CacheSize: 8}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	a.now = func() time.Time { return now }
	ctx := context.Background()
	if err := a.Authorize(ctx, bearerReq("Bearer alice"), "a", "sb"); err != nil {
		t.Fatalf("alice on her namespace: %v", err)
	}
	if sar.last.UID != "ua" || len(sar.last.Groups) != 1 || sar.last.Extra["k"][0] != "v" || sar.last.ResourceAttributes.Name != "sb" {
		t.Fatalf("SAR spec does not carry the identity and the sandbox: %+v", sar.last)
	}
	if err := a.Authorize(ctx, bearerReq("Bearer bob"), "a", "sb"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("bob on alice's namespace: %v", err)
	}
	if err := a.Authorize(ctx, bearerReq("Bearer alice"), "b", "sb"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("alice on another namespace: %v", err)
	}
	if err := a.Authorize(ctx, bearerReq(""), "a", "sb"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("anonymous: %v", err)
	}
	calls := sar.calls
	for range 3 {
		_ = a.Authorize(ctx, bearerReq("Bearer alice"), "a", "sb")
		_ = a.Authorize(ctx, bearerReq("Bearer bob"), "a", "sb")
	}
	if sar.calls != calls {
		t.Fatalf("cached decisions made %d more SARs", sar.calls-calls)
	}
	// After the negative TTL the deny is asked again; the allow is not.
	now = now.Add(3 * time.Second)
	_ = a.Authorize(ctx, bearerReq("Bearer alice"), "a", "sb")
	_ = a.Authorize(ctx, bearerReq("Bearer bob"), "a", "sb")
	if sar.calls != calls+1 {
		t.Fatalf("after 3s: %d SARs, want exactly the deny refreshed", sar.calls-calls)
	}
	now = now.Add(10 * time.Second)
	_ = a.Authorize(ctx, bearerReq("Bearer alice"), "a", "sb")
	if sar.calls != calls+2 {
		t.Fatal("allow not refreshed after its TTL")
	}
	if sar.last.User != "system:serviceaccount:a:default" {
		t.Fatalf("refreshed allow asked for %q", sar.last.User)
	}
	// Anonymous requests are reviewed as system:anonymous.
	now = now.Add(time.Minute)
	_ = a.Authorize(ctx, bearerReq(""), "a", "other")
	if sar.last.User != "system:anonymous" || sar.last.Groups[0] != "system:unauthenticated" {
		t.Fatalf("anonymous SAR: %+v", sar.last)
	}
}

type userReviewer struct{ users map[string]authnv1.UserInfo }

func (u *userReviewer) Create(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	out := tr.DeepCopy()
	if ui, ok := u.users[tr.Spec.Token]; ok {
		out.Status.Authenticated, out.Status.User = true, ui
	}
	return out, nil
}
