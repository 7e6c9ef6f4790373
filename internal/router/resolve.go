package router

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"time"
)

// Resolver is the read side of the sandbox cache. Index implements it; the
// informer adapter keeps an Index current. Unit tests of the request logic
// feed an Index directly.
type Resolver interface {
	// Lookup returns the current view of key (Exists false when unknown).
	Lookup(key SandboxKey) *Snapshot
	// Subscribe returns a channel closed at the next change of key and a
	// release function.
	Subscribe(key SandboxKey) (<-chan struct{}, func())
	// KnownNamespace reports whether any sandbox lives in ns.
	KnownNamespace(ns string) bool
	// AddrOwners lists the sandboxes whose pods hold address a.
	AddrOwners(a netip.Addr) []SandboxKey
}

// cacheLagGrace bounds how long a request for an unknown sandbox waits for it
// to appear. Clients learn sandbox names from their own watches, which can be
// a few milliseconds ahead of the router's; a short wait turns that race into
// latency instead of a 404, while an unknown name still fails fast enough.
const cacheLagGrace = time.Second

// Target is a resolved, policy-checked upstream.
type Target struct {
	Route Route
	Addr  netip.AddrPort
	// Host, in the reduced mode only, is a DNS name to dial instead of
	// Addr (port Route.Port); the dialer checks what it resolves to.
	Host string
}

// resolution turns a validated Route into a Target: it finds the sandbox in
// the cache, checks identity and port, wakes it if needed, waits for it to
// become routable and picks a verified address.
type resolution struct {
	resolver      Resolver
	policy        *AddrPolicy
	alwaysPorts   []uint16
	resumer       *Resumer // nil: auto-resume disabled
	waitTimeout   time.Duration
	notFoundGrace time.Duration
}

// resolve returns the target, or the refusal; held reports whether the
// request had to wait for the sandbox (for the hold-duration metric).
func (rs *resolution) resolve(ctx context.Context, r Route) (Target, bool, *httpError) {
	key := r.Key()
	held := false
	snap := rs.resolver.Lookup(key)
	if !visible(snap, r) {
		held = true
		var herr *httpError
		if snap, herr = rs.awaitExisting(ctx, r); herr != nil {
			return Target{}, held, herr
		}
	}
	if r.UID != "" && r.UID != snap.UID {
		return Target{}, held, errorf(http.StatusForbidden,
			fmt.Sprintf("X-Sandbox-UID does not match sandbox %s.", key))
	}
	if !snap.AllowsPort(r.Port, rs.alwaysPorts) {
		return Target{}, held, errorf(http.StatusForbidden,
			fmt.Sprintf("Port %d is not exposed by sandbox %s.", r.Port, key))
	}
	staleHintOK := false
	if !snap.Routable {
		held = true
		// A hint sent to a sandbox that is not running yet is most likely its
		// previous pod's address, cached by the SDK before a suspend (and
		// possibly before this router started, so not in History). It is
		// never dialled, so it is ignored unless it names another sandbox's
		// pod, which is refused before anything is woken up.
		if r.PodIP.IsValid() {
			for _, k := range rs.resolver.AddrOwners(r.PodIP) {
				if k != key {
					return Target{}, held, errorf(http.StatusForbidden,
						fmt.Sprintf("X-Sandbox-Pod-IP does not belong to sandbox %s.", key))
				}
			}
			staleHintOK = true
		}
		var err *httpError
		if snap, err = rs.awaitRoutable(ctx, r, snap); err != nil {
			return Target{}, held, err
		}
	}
	addr, herr := pickAddr(snap, r, staleHintOK)
	if herr != nil {
		return Target{}, held, herr
	}
	ap := netip.AddrPortFrom(addr, r.Port)
	if !rs.policy.Permit(ap) {
		return Target{}, held, errorf(http.StatusForbidden,
			fmt.Sprintf("Target address of sandbox %s is not allowed.", key))
	}
	return Target{Route: r, Addr: ap}, held, nil
}

// visible reports whether the request may see the sandbox at all. An
// unclaimed warm-pool sandbox is reachable only by UID, which acts as a
// capability (same rule as upstream's name index).
func visible(s *Snapshot, r Route) bool {
	return s.Exists && (!s.WarmPool || (r.UID != "" && r.UID == s.UID))
}

// awaitExisting waits briefly for the cache to catch up with a sandbox the
// client may have just seen.
func (rs *resolution) awaitExisting(ctx context.Context, r Route) (*Snapshot, *httpError) {
	key := r.Key()
	ctx, cancel := context.WithTimeout(ctx, rs.notFoundGrace)
	defer cancel()
	s, err := waitFor(ctx, rs.resolver, key, func(s *Snapshot) bool { return visible(s, r) })
	if err != nil {
		return nil, errorf(http.StatusNotFound, fmt.Sprintf("Sandbox %s not found.", key))
	}
	return s, nil
}

// awaitRoutable holds the request until the sandbox can take it: it resumes
// a suspended sandbox (shared across concurrent requests) and otherwise
// waits for a starting one, bounded by waitTimeout.
func (rs *resolution) awaitRoutable(ctx context.Context, r Route, s *Snapshot) (*Snapshot, *httpError) {
	key := r.Key()
	if s.Terminal {
		return nil, errorf(http.StatusServiceUnavailable,
			fmt.Sprintf("Sandbox %s is not available: %s.", key, s.Reason))
	}
	if s.Suspended && rs.resumer == nil {
		return nil, errorf(http.StatusServiceUnavailable, fmt.Sprintf("Sandbox %s is suspended.", key))
	}
	if s.Suspended && s.NoAutoResume {
		return nil, errorf(http.StatusServiceUnavailable,
			fmt.Sprintf("Sandbox %s is suspended and opts out of auto-resume (%s: \"false\").", key, AutoResumeAnnotation))
	}
	ctx, cancel := context.WithTimeout(ctx, rs.waitTimeout)
	defer cancel()
	if s.Suspended {
		if err := rs.resumer.Resume(ctx, key, s.UID, s.ResourceVersion); err != nil {
			return nil, errorf(http.StatusServiceUnavailable,
				fmt.Sprintf("Could not resume sandbox %s: %v", key, err))
		}
	}
	uid := s.UID
	s, err := waitFor(ctx, rs.resolver, key, func(s *Snapshot) bool {
		return !s.Exists || s.UID != uid || s.Routable || s.Terminal
	})
	switch {
	case err != nil:
		return nil, errorf(http.StatusServiceUnavailable,
			fmt.Sprintf("Timed out waiting for sandbox %s to become ready.", key))
	case !s.Exists || s.UID != uid:
		return nil, errorf(http.StatusServiceUnavailable,
			fmt.Sprintf("Sandbox %s was deleted while waiting for it.", key))
	case s.Terminal:
		return nil, errorf(http.StatusServiceUnavailable,
			fmt.Sprintf("Sandbox %s is not available: %s.", key, s.Reason))
	}
	if rs.resumer != nil {
		rs.resumer.forget(key)
	}
	return s, nil
}

// waitFor blocks until cond holds for key's snapshot or ctx ends.
func waitFor(ctx context.Context, res Resolver, key SandboxKey, cond func(*Snapshot) bool) (*Snapshot, error) {
	for {
		ch, release := res.Subscribe(key)
		s := res.Lookup(key)
		if cond(s) {
			release()
			return s, nil
		}
		select {
		case <-ch:
			release()
		case <-ctx.Done():
			release()
			return s, fmt.Errorf("waiting for sandbox %s: %w", key, ctx.Err())
		}
	}
}

// pickAddr chooses the upstream address. A client hint must be one of the
// sandbox's verified addresses; a hint that was this sandbox's address
// before (the SDK cached it before a suspend/resume), or any hint when
// staleOK, is ignored in favour of the current address; anything else is
// refused, since it names some other host.
func pickAddr(s *Snapshot, r Route, staleOK bool) (netip.Addr, *httpError) {
	if !r.PodIP.IsValid() {
		return s.Addrs[0], nil
	}
	if slices.Contains(s.Addrs, r.PodIP) {
		return r.PodIP, nil
	}
	if staleOK || slices.Contains(s.History, r.PodIP) {
		return s.Addrs[0], nil
	}
	return netip.Addr{}, errorf(http.StatusForbidden,
		fmt.Sprintf("X-Sandbox-Pod-IP does not belong to sandbox %s.", s.Key))
}
