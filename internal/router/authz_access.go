package router

import (
	"context"
	"fmt"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"golang.org/x/sync/singleflight"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// DefaultAccessVerb is the RBAC verb on sandboxes a caller needs to reach a
// sandbox through the router. Not "get": the aggregated view roles and many
// read-only dashboards grant get on everything, and reading a Sandbox
// object is much less than running code in it. "connect" mirrors what
// pods/exec and pods/portforward mean for Pods and is granted by no
// built-in role except wildcard ones (cluster-admin, and roles with "*").
const DefaultAccessVerb = "connect"

// accessReviewCallTimeout bounds one SubjectAccessReview call.
const accessReviewCallTimeout = 3 * time.Second

// anonymousKey is the cache key of requests without a token. It cannot
// collide with a TokenHash (hex digits only).
const anonymousKey = "anonymous"

// anonymousUser is how the apiserver names a request without credentials.
var anonymousUser = authnv1.UserInfo{Username: "system:anonymous", Groups: []string{"system:unauthenticated"}}

// AccessReviewer is the slice of client-go's SubjectAccessReviewInterface
// used here.
type AccessReviewer interface {
	Create(ctx context.Context, sar *authzv1.SubjectAccessReview, opts metav1.CreateOptions) (*authzv1.SubjectAccessReview, error)
}

// AccessReviewOptions configures the SubjectAccessReview half of the
// tokenreview authorizer.
type AccessReviewOptions struct {
	Reviewer AccessReviewer
	// Verb on agents.x-k8s.io sandboxes (named, in the target namespace);
	// empty = DefaultAccessVerb.
	Verb string
	// TTL caches an allow, NegativeTTL a deny or an API error. Both are
	// short: a revoked RoleBinding must stop traffic within seconds.
	TTL         time.Duration
	NegativeTTL time.Duration
	CacheSize   int
}

type accessReviewer struct {
	opts   AccessReviewOptions
	now    func() time.Time
	cache  *lru[accessResult]
	flight singleflight.Group
}

type accessResult struct {
	allowed bool
	reason  string
	err     error
}

func newAccessReviewer(o AccessReviewOptions, now func() time.Time) (*accessReviewer, error) {
	if o.Reviewer == nil {
		return nil, fmt.Errorf("access review needs a SubjectAccessReview client")
	}
	if o.Verb == "" {
		o.Verb = DefaultAccessVerb
	}
	if o.TTL <= 0 || o.NegativeTTL <= 0 {
		return nil, fmt.Errorf("access review TTLs must be positive, got %s and %s", o.TTL, o.NegativeTTL)
	}
	if o.CacheSize <= 0 {
		return nil, fmt.Errorf("access review cache size must be positive, got %d", o.CacheSize)
	}
	return &accessReviewer{opts: o, now: now, cache: newLRU[accessResult](o.CacheSize)}, nil
}

// authorize asks whether user may use the verb on the named sandbox. The
// decision is cached per (credential, namespace, name): the credential key
// is the token hash, so one identity's decisions never answer another's.
func (a *accessReviewer) authorize(ctx context.Context, credKey string, user authnv1.UserInfo, namespace, name string) error {
	key := credKey + "\x00" + namespace + "\x00" + name
	res, ok := a.cache.get(key, a.now())
	if !ok {
		v, _, _ := a.flight.Do(key, func() (any, error) {
			res := a.review(ctx, user, namespace, name)
			ttl := a.opts.TTL
			if !res.allowed {
				ttl = a.opts.NegativeTTL
			}
			a.cache.put(key, res, a.now().Add(ttl))
			return res, nil
		})
		res = v.(accessResult)
	}
	switch {
	case res.err != nil:
		return res.err
	case res.allowed:
		return nil
	case credKey == anonymousKey:
		// Nobody to blame: ask for credentials rather than refuse them.
		return fmt.Errorf("%w: a bearer token is required", ErrUnauthenticated)
	}
	return fmt.Errorf("%w: %s may not %s sandbox %s/%s", ErrForbidden, user.Username, a.opts.Verb, namespace, name)
}

func (a *accessReviewer) review(ctx context.Context, user authnv1.UserInfo, namespace, name string) accessResult {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), accessReviewCallTimeout)
	defer cancel()
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User:   user.Username,
		UID:    user.UID,
		Groups: user.Groups,
		ResourceAttributes: &authzv1.ResourceAttributes{
			Namespace: namespace,
			Verb:      a.opts.Verb,
			Group:     sandboxv1beta1.GroupVersion.Group,
			Resource:  "sandboxes",
			Name:      name,
		},
	}}
	if len(user.Extra) > 0 {
		sar.Spec.Extra = make(map[string]authzv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			sar.Spec.Extra[k] = authzv1.ExtraValue(v)
		}
	}
	out, err := a.opts.Reviewer.Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return accessResult{err: fmt.Errorf("subjectaccessreview: %w", err)}
	}
	return accessResult{allowed: out.Status.Allowed && !out.Status.Denied, reason: out.Status.Reason}
}
