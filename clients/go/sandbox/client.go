package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
)

// Client creates and tracks sandboxes that share one configuration and one
// set of Kubernetes clients.
type Client struct {
	opts   Options
	helper *K8sHelper

	mu        sync.Mutex
	sandboxes map[Key]*Sandbox

	cleanupMu   sync.Mutex
	cleanupStop func()
}

// NewClient validates opts (WarmPoolName may be empty: it is given per
// CreateSandbox) and builds the shared Kubernetes clients.
func NewClient(ctx context.Context, opts Options) (*Client, error) {
	_ = ctx // reserved: client construction does no I/O today
	o, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	return &Client{opts: o, helper: o.K8sHelper, sandboxes: map[Key]*Sandbox{}}, nil
}

// CreateSandbox claims a sandbox from warmPoolName in namespace (empty:
// the client's namespace), opens it, and tracks it under its claim.
func (c *Client) CreateSandbox(ctx context.Context, warmPoolName, namespace string) (*Sandbox, error) {
	if err := validateWarmPoolName(warmPoolName); err != nil {
		return nil, err
	}
	o := c.opts
	o.WarmPoolName = warmPoolName
	if namespace != "" {
		o.Namespace = namespace
	}
	sb, err := New(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := sb.Open(ctx); err != nil {
		return nil, err
	}
	return c.adopt(ctx, Key{Namespace: o.Namespace, ClaimName: sb.ClaimName()}, sb), nil
}

// adopt registers sb under key, unless a ready handle is registered there
// already: then sb is only disconnected (never closed: the claim is
// shared) and the registered handle is returned.
func (c *Client) adopt(ctx context.Context, key Key, sb *Sandbox) *Sandbox {
	c.mu.Lock()
	if cur, ok := c.sandboxes[key]; ok && cur != sb && cur.IsReady() {
		c.mu.Unlock()
		_ = sb.Disconnect(ctx)
		return cur
	}
	c.sandboxes[key] = sb
	c.mu.Unlock()
	return sb
}

// GetSandbox returns the tracked, ready handle of a claim, or attaches a
// new handle to the claim's sandbox. A missing claim is an error matching
// ErrNotFound.
func (c *Client) GetSandbox(ctx context.Context, claimName, namespace string) (*Sandbox, error) {
	if namespace == "" {
		namespace = c.opts.Namespace
	}
	key := Key{Namespace: namespace, ClaimName: claimName}
	c.mu.Lock()
	if sb, ok := c.sandboxes[key]; ok && sb.IsReady() {
		c.mu.Unlock()
		return sb, nil
	}
	c.mu.Unlock()

	var claim extv1beta1.SandboxClaim
	if err := c.helper.ExtensionsClient.Get(ctx, types.NamespacedName{Namespace: namespace, Name: claimName}, &claim); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("sandbox: claim %s: %w", key, ErrNotFound)
		}
		return nil, fmt.Errorf("sandbox: getting claim %s: %w", key, err)
	}
	name := claim.Status.SandboxStatus.Name
	if name == "" {
		return nil, fmt.Errorf("sandbox: claim %s is not bound to a sandbox yet (conditions: %s); GetSandbox again once it is: %w",
			key, conditionsString(claim.Status.Conditions), ErrNotReady)
	}
	o := c.opts
	o.Namespace = namespace
	o.WarmPoolName = claim.Spec.WarmPoolRef.Name
	sb, err := newAttached(ctx, o, claimName, name)
	if err != nil {
		return nil, err
	}
	if err := sb.Open(ctx); err != nil {
		return nil, err
	}
	return c.adopt(ctx, key, sb), nil
}

// AttachSandbox connects to an existing Sandbox that no claim owns, in
// namespace (empty: the client's); see Attach. The handle is not tracked:
// the Sandbox is not the client's to delete.
func (c *Client) AttachSandbox(ctx context.Context, sandboxName, namespace string) (*Sandbox, error) {
	o := c.opts
	if namespace != "" {
		o.Namespace = namespace
	}
	return Attach(ctx, o, sandboxName)
}

// ListActiveSandboxes returns the keys of tracked handles that are ready,
// forgetting the others.
func (c *Client) ListActiveSandboxes() []Key {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]Key, 0, len(c.sandboxes))
	for k, sb := range c.sandboxes {
		if !sb.IsReady() {
			delete(c.sandboxes, k)
			continue
		}
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	return keys
}

// ListAllSandboxes returns the names of all SandboxClaims in namespace
// (empty: the client's), whoever created them.
func (c *Client) ListAllSandboxes(ctx context.Context, namespace string) ([]string, error) {
	if namespace == "" {
		namespace = c.opts.Namespace
	}
	var list extv1beta1.SandboxClaimList
	if err := c.helper.ExtensionsClient.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("sandbox: listing claims in %s: %w", namespace, err)
	}
	names := make([]string, 0, len(list.Items))
	for _, cl := range list.Items {
		names = append(names, cl.Name)
	}
	sort.Strings(names)
	return names, nil
}

// DeleteSandbox closes the tracked handle of a claim, or deletes the claim
// when it is not tracked. A missing claim is not an error.
func (c *Client) DeleteSandbox(ctx context.Context, claimName, namespace string) error {
	if namespace == "" {
		namespace = c.opts.Namespace
	}
	key := Key{Namespace: namespace, ClaimName: claimName}
	c.mu.Lock()
	sb, ok := c.sandboxes[key]
	delete(c.sandboxes, key)
	c.mu.Unlock()
	if ok {
		if err := sb.Close(ctx); err != nil {
			// Keep tracking it so a later DeleteSandbox or DeleteAll
			// retries.
			c.mu.Lock()
			c.sandboxes[key] = sb
			c.mu.Unlock()
			return err
		}
		return nil
	}
	return c.helper.deleteClaim(ctx, namespace, claimName)
}

// DeleteAll closes every tracked handle, best effort, and returns the
// errors joined.
func (c *Client) DeleteAll(ctx context.Context) error {
	c.mu.Lock()
	keys := make([]Key, 0, len(c.sandboxes))
	for k := range c.sandboxes {
		keys = append(keys, k)
	}
	c.mu.Unlock()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, k := range keys {
		wg.Go(func() {
			if err := c.DeleteSandbox(ctx, k.ClaimName, k.Namespace); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// EnableAutoCleanup deletes every tracked sandbox when the process gets
// SIGINT or SIGTERM, then re-raises the signal so the program still dies
// of it. Calling it again returns the same stop function; stop disables
// the handler.
func (c *Client) EnableAutoCleanup() (stop func()) {
	c.cleanupMu.Lock()
	defer c.cleanupMu.Unlock()
	if c.cleanupStop != nil {
		return c.cleanupStop
	}
	ch := make(chan os.Signal, 1)
	quit := make(chan struct{})
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-ch:
			signal.Stop(ch)
			ctx, cancel := context.WithTimeout(context.Background(), c.opts.CleanupTimeout)
			if err := c.DeleteAll(ctx); err != nil {
				c.opts.Logger.Error(err, "auto-cleanup: deleting sandboxes")
			}
			cancel()
			if s, ok := sig.(syscall.Signal); ok {
				signal.Reset(s)
				_ = syscall.Kill(os.Getpid(), s)
			}
		case <-quit:
		}
	}()
	var once sync.Once
	c.cleanupStop = func() {
		once.Do(func() {
			signal.Stop(ch)
			close(quit)
			c.cleanupMu.Lock()
			c.cleanupStop = nil
			c.cleanupMu.Unlock()
		})
	}
	return c.cleanupStop
}
