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
}

// TokenReviewAuthorizer authenticates bearer tokens with the apiserver's
// TokenReview API. It authenticates only: any authenticated principal may
// reach any sandbox (compose it with a custom authorizer for tenancy).
type TokenReviewAuthorizer struct {
	reviewer TokenReviewer
	opts     TokenReviewOptions
	now      func() time.Time
	cache    *lru
	flight   singleflight.Group
}

// NewTokenReviewAuthorizer validates opts and returns the authorizer.
func NewTokenReviewAuthorizer(rev TokenReviewer, opts TokenReviewOptions) (*TokenReviewAuthorizer, error) {
	if opts.TTL <= 0 {
		return nil, fmt.Errorf("tokenreview TTL must be positive, got %s", opts.TTL)
	}
	if opts.CacheSize <= 0 {
		return nil, fmt.Errorf("tokenreview cache size must be positive, got %d", opts.CacheSize)
	}
	return &TokenReviewAuthorizer{reviewer: rev, opts: opts, now: time.Now, cache: newLRU(opts.CacheSize)}, nil
}

// TokenHash is the cache key of a token: hex SHA-256, so raw tokens are
// never held in memory longer than one request.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

type reviewResult struct {
	authenticated bool
	err           error
}

// Authorize implements Authorizer.
func (a *TokenReviewAuthorizer) Authorize(ctx context.Context, r *http.Request, _, _ string) error {
	token := BearerToken(r)
	if token == "" {
		if a.opts.RequireToken {
			return ErrUnauthenticated
		}
		return nil
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
	return nil
}

func (a *TokenReviewAuthorizer) review(ctx context.Context, token string) reviewResult {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tokenReviewCallTimeout)
	defer cancel()
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: a.opts.Audiences}}
	out, err := a.reviewer.Create(ctx, tr, metav1.CreateOptions{})
	if err != nil {
		return reviewResult{err: fmt.Errorf("tokenreview: %w", err)}
	}
	if out.Status.Error != "" && !out.Status.Authenticated {
		return reviewResult{authenticated: false}
	}
	return reviewResult{authenticated: out.Status.Authenticated}
}

// lru is a small size-bounded cache with per-entry expiry.
type lru struct {
	mu    sync.Mutex
	size  int
	ll    *list.List
	items map[string]*list.Element
}

type lruEntry struct {
	key     string
	val     reviewResult
	expires time.Time
}

func newLRU(size int) *lru {
	return &lru{size: size, ll: list.New(), items: map[string]*list.Element{}}
}

func (c *lru) get(key string, now time.Time) (reviewResult, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return reviewResult{}, false
	}
	e := el.Value.(*lruEntry)
	if !now.Before(e.expires) {
		c.ll.Remove(el)
		delete(c.items, key)
		return reviewResult{}, false
	}
	c.ll.MoveToFront(el)
	return e.val, true
}

func (c *lru) put(key string, val reviewResult, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		el.Value = &lruEntry{key: key, val: val, expires: expires}
		c.ll.MoveToFront(el)
		return
	}
	c.items[key] = c.ll.PushFront(&lruEntry{key: key, val: val, expires: expires})
	for c.ll.Len() > c.size {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.items, old.Value.(*lruEntry).key)
	}
}
