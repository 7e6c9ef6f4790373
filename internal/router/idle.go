package router

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// IdleTracker records, per sandbox, when this router last forwarded traffic
// and how many requests (including upgraded sessions and gRPC streams) are
// in flight. The request path only touches atomics after the first request
// for a sandbox.
type IdleTracker struct {
	now func() time.Time
	m   sync.Map // SandboxKey -> *activity
}

type activity struct {
	last     atomic.Int64 // unix nanoseconds
	inflight atomic.Int32
	// published is the activity time last written to the Sandbox.
	published atomic.Int64
}

// NewIdleTracker returns an empty tracker.
func NewIdleTracker() *IdleTracker { return &IdleTracker{now: time.Now} }

// Begin marks the start of a forwarded request; the returned func marks its
// end (the end counts as activity too, so a long download keeps a sandbox
// awake until it finishes).
func (t *IdleTracker) Begin(key SandboxKey) func() {
	a := t.get(key)
	a.inflight.Add(1)
	a.last.Store(t.now().UnixNano())
	return func() {
		a.last.Store(t.now().UnixNano())
		a.inflight.Add(-1)
	}
}

// LastActivity returns the last activity time and in-flight count for key.
func (t *IdleTracker) LastActivity(key SandboxKey) (time.Time, int32, bool) {
	v, ok := t.m.Load(key)
	if !ok {
		return time.Time{}, 0, false
	}
	a := v.(*activity)
	return time.Unix(0, a.last.Load()), a.inflight.Load(), true
}

func (t *IdleTracker) get(key SandboxKey) *activity {
	if v, ok := t.m.Load(key); ok {
		return v.(*activity)
	}
	v, _ := t.m.LoadOrStore(key, &activity{})
	return v.(*activity)
}

// IdleSuspender suspends sandboxes that saw no traffic for IdleAfter.
//
// Router replicas share the decision through the last-activity annotation:
// each replica publishes its own activity at most every IdleAfter/4, and
// suspends only when neither its own record nor the annotation shows recent
// traffic. The suspend patch is conditional on the resourceVersion the
// decision was based on, so a concurrent publish by another replica wins.
// Only sandboxes that were reached through a router are ever suspended;
// sandboxes used solely by port-forward are left alone.
type IdleSuspender struct {
	Tracker   *IdleTracker
	Resolver  interface{ Range(func(*Snapshot)) }
	Lookup    Resolver
	Control   SandboxControl
	Metrics   *Metrics
	IdleAfter time.Duration
	Log       logr.Logger
	now       func() time.Time
}

// interval is how often the suspender looks: fine enough that a sandbox is
// suspended within ~10% of its idle period, never busier than once a second.
func (s *IdleSuspender) interval() time.Duration {
	return min(max(s.IdleAfter/10, time.Second), 30*time.Second)
}

func (s *IdleSuspender) publishEvery() time.Duration {
	return max(s.IdleAfter/4, time.Second)
}

// Run loops until ctx ends.
func (s *IdleSuspender) Run(ctx context.Context) {
	if s.now == nil {
		s.now = time.Now
	}
	t := time.NewTicker(s.interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Tick(ctx)
		}
	}
}

// Tick makes one pass over the candidates. Exposed for tests.
func (s *IdleSuspender) Tick(ctx context.Context) {
	if s.now == nil {
		s.now = time.Now
	}
	now := s.now()
	seen := map[SandboxKey]bool{}
	s.Tracker.m.Range(func(k, v any) bool {
		key := k.(SandboxKey)
		seen[key] = true
		snap := s.Lookup.Lookup(key)
		if !snap.Exists {
			// Forget sandboxes that are gone so the map stays bounded.
			s.Tracker.m.Delete(key)
			return true
		}
		s.consider(ctx, now, snap, v.(*activity))
		return true
	})
	// Sandboxes that only other replicas served, or served by a replica
	// that has since gone away.
	s.Resolver.Range(func(snap *Snapshot) {
		if !seen[snap.Key] && !snap.LastActivity.IsZero() {
			s.consider(ctx, now, snap, nil)
		}
	})
}

func (s *IdleSuspender) consider(ctx context.Context, now time.Time, snap *Snapshot, a *activity) {
	if snap.Suspended || snap.Deleting {
		return
	}
	last := snap.LastActivity
	if snap.ReadySince.After(last) {
		last = snap.ReadySince
	}
	if a != nil {
		if a.inflight.Load() > 0 {
			a.last.Store(now.UnixNano())
		}
		if local := time.Unix(0, a.last.Load()); local.After(last) {
			last = local
			if local.Sub(snap.LastActivity) >= s.publishEvery() && a.published.Load() < a.last.Load() &&
				now.Sub(local) < s.IdleAfter {
				if err := s.Control.MarkActivity(ctx, snap.Key, snap.UID, local); err != nil {
					s.Log.V(1).Info("publishing activity failed", "sandbox", snap.Key.String(), "error", err.Error())
				} else {
					a.published.Store(local.UnixNano())
				}
			}
		}
		if a.inflight.Load() > 0 {
			return
		}
	}
	if now.Sub(last) < s.IdleAfter {
		return
	}
	err := s.Control.SetOperatingMode(ctx, snap.Key, snap.UID, ModeSuspended, snap.ResourceVersion, time.Time{})
	s.Metrics.idleSuspend(snap.Key.Namespace, err)
	if err != nil {
		s.Log.V(1).Info("idle suspend skipped", "sandbox", snap.Key.String(), "error", err.Error())
		return
	}
	s.Log.Info("suspended idle sandbox", "sandbox", snap.Key.String(), "idle_for", now.Sub(last).String())
}
