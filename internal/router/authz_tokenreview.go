package router

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"golang.org/x/sync/singleflight"
)

// tokenReviewCallTimeout bounds one TokenReview call.
const tokenReviewCallTimeout = 3 * time.Second

// TokenReviewer is the slice of client-go's TokenReviewInterface used here.
type TokenReviewer interface {
	Create(ctx context.Context, tr *authnv1.TokenReview, opts metav1.CreateOptions) (*authnv1.TokenReview, error)
}

// TokenReviewOptions configures TokenReviewAuthorizer.
type TokenReviewOptions struct {
	TTL          time.Duration
	CacheSize    int
	RequireToken bool
	Audiences    []string
	// Access, when set, adds authorization: the authenticated user must
	// also be allowed by a SubjectAccessReview on the target sandbox.
	Access *AccessReviewOptions
}

// TokenReviewAuthorizer authenticates bearer tokens with the apiserver's
// TokenReview API and, with Access set, authorizes the caller for the
// target sandbox with a SubjectAccessReview. Without Access it
// authenticates only (the reference's behaviour): any authenticated
// principal may reach any sandbox.
type TokenReviewAuthorizer struct {
	reviewer TokenReviewer
	opts     TokenReviewOptions
	now      func() time.Time
	cache    *lru[reviewResult]
	flight   singleflight.Group
	access   *accessReviewer
}

// NewTokenReviewAuthorizer validates opts and returns the authorizer.
func NewTokenReviewAuthorizer(rev TokenReviewer, opts TokenReviewOptions) (*TokenReviewAuthorizer, error) {
	if opts.TTL <= 0 {
		return nil, fmt.Errorf("tokenreview TTL must be positive, got %s", opts.TTL)
	}
	if opts.CacheSize <= 0 {
		return nil, fmt.Errorf("tokenreview cache size must be positive, got %d", opts.CacheSize)
	}
	a := &TokenReviewAuthorizer{reviewer: rev, opts: opts, now: time.Now, cache: newLRU[reviewResult](opts.CacheSize)}
	if opts.Access != nil {
		ar, err := newAccessReviewer(*opts.Access, func() time.Time { return a.now() })
		if err != nil {
			return nil, err
		}
		a.access = ar
	}
	return a, nil
}

// TokenHash is the cache key of a token: hex SHA-256, so raw tokens are
// never held in memory longer than one request.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

type reviewResult struct {
	authenticated bool
	user          authnv1.UserInfo
	err           error
}

// Authorize implements Authorizer.
func (a *TokenReviewAuthorizer) Authorize(ctx context.Context, r *http.Request, namespace, name string) error {
	token := BearerToken(r)
	if token == "" {
		if a.opts.RequireToken {
			return ErrUnauthenticated
		}
		if a.access == nil {
			return nil
		}
		// No credentials: the request is judged as the apiserver judges
		// anonymous requests, so only an explicit RBAC grant to
		// system:anonymous or system:unauthenticated lets it through.
		return a.access.authorize(ctx, anonymousKey, anonymousUser, namespace, name)
	}
	key := TokenHash(token)
	res, ok := a.cache.get(key, a.now())
	if !ok {
		v, _, _ := a.flight.Do(key, func() (any, error) {
			res := a.review(ctx, token)
			ttl := a.opts.TTL
			if res.err != nil {
				// Errors are cached briefly so an apiserver outage does not
				// turn every request into another failing API call.
				ttl = max(a.opts.TTL/3, time.Second)
			}
			a.cache.put(key, res, a.now().Add(ttl))
			return res, nil
		})
		res = v.(reviewResult)
	}
	switch {
	case res.err != nil:
		return res.err
	case !res.authenticated:
		return ErrUnauthenticated
	}
	if a.access == nil {
		return nil
	}
	return a.access.authorize(ctx, key, res.user, namespace, name)
}

func (a *TokenReviewAuthorizer) review(ctx context.Context, token string) reviewResult {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tokenReviewCallTimeout)
	defer cancel()
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: a.opts.Audiences}}
	out, err := a.reviewer.Create(ctx, tr, metav1.CreateOptions{})
	if err != nil {
		return reviewResult{err: fmt.Errorf("tokenreview: %w", err)}
	}
	if !out.Status.Authenticated {
		return reviewResult{authenticated: false}
	}
	return reviewResult{authenticated: true, user: out.Status.User}
}

// lru is a small size-bounded cache with per-entry expiry.
type lru[V any] struct {
	mu    sync.Mutex
	size  int
	ll    *list.List
	items map[string]*list.Element
}

type lruEntry[V any] struct {
	key     string
	val     V
	expires time.Time
}

func newLRU[V any](size int) *lru[V] {
	return &lru[V]{size: size, ll: list.New(), items: map[string]*list.Element{}}
}

func (c *lru[V]) get(key string, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero V
	el, ok := c.items[key]
	if !ok {
		return zero, false
	}
	e := el.Value.(*lruEntry[V])
	if !now.Before(e.expires) {
		c.ll.Remove(el)
		delete(c.items, key)
		return zero, false
	}
	c.ll.MoveToFront(el)
	return e.val, true
}

func (c *lru[V]) put(key string, val V, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		el.Value = &lruEntry[V]{key: key, val: val, expires: expires}
		c.ll.MoveToFront(el)
		return
	}
	c.items[key] = c.ll.PushFront(&lruEntry[V]{key: key, val: val, expires: expires})
	for c.ll.Len() > c.size {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.items, old.Value.(*lruEntry[V]).key)
	}
}
