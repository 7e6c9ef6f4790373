// Package expectations remembers, per key (a warm pool), the creates and
// deletes a controller has issued but its informer cache has not shown yet.
// A controller that sizes a set of objects from a cache must not act again
// until the cache has caught up with its own writes, or a lagging List makes
// it create the same objects twice. This is Kubernetes' ReplicaSet
// "ControllerExpectations" idea, reduced to what the warm pool needs: a
// create counter, a set of UIDs being deleted, and a timeout so a lost watch
// event can never wedge a key forever. Children (children.go) is the same
// idea for an owner with named children, such as a Sandbox's Pod.
package expectations

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// DefaultTimeout is how long unobserved expectations block a key. After it
// the controller assumes the watch event was lost and acts on its cache.
const DefaultTimeout = 5 * time.Minute

type record struct {
	pendingCreations int
	pendingDeletions map[types.UID]struct{}
	raisedAt         time.Time
}

func (r *record) empty() bool {
	return r.pendingCreations <= 0 && len(r.pendingDeletions) == 0
}

// Expectations tracks pending creates and deletes per key. The zero value is
// not usable; use New. All methods are safe for concurrent use.
type Expectations struct {
	mu      sync.Mutex
	records map[string]*record
	timeout time.Duration
	now     func() time.Time
}

// New returns an empty tracker whose records expire after timeout (≤0 means
// DefaultTimeout).
func New(timeout time.Duration) *Expectations {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Expectations{records: map[string]*record{}, timeout: timeout, now: time.Now}
}

// SetClock replaces the time source; for tests.
func (e *Expectations) SetClock(now func() time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.now = now
}

// get returns the live record of key, dropping it when it expired. Callers
// hold the lock.
func (e *Expectations) get(key string) *record {
	r, ok := e.records[key]
	if !ok {
		return nil
	}
	if r.empty() || e.now().Sub(r.raisedAt) > e.timeout {
		delete(e.records, key)
		return nil
	}
	return r
}

func (e *Expectations) getOrCreate(key string) *record {
	if r := e.get(key); r != nil {
		return r
	}
	r := &record{pendingDeletions: map[types.UID]struct{}{}}
	e.records[key] = r
	return r
}

// Satisfied reports whether every create and delete issued for key has been
// observed (or the record timed out).
func (e *Expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.get(key) == nil
}

// TryExpectCreations atomically checks that key is satisfied and, if so,
// records n pending creations. It returns false (and records nothing) when
// n ≤ 0 or earlier writes are still unobserved, so two reconciles working
// from the same stale cache can never both create.
func (e *Expectations) TryExpectCreations(key string, n int) bool {
	if n <= 0 {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.get(key) != nil {
		return false
	}
	r := e.getOrCreate(key)
	r.pendingCreations = n
	r.raisedAt = e.now()
	return true
}

// CreationObserved lowers the pending creations of key by one; called from
// the informer's add handler before the key is enqueued.
func (e *Expectations) CreationObserved(key string) {
	e.LowerCreations(key, 1)
}

// LowerCreations lowers the pending creations of key by n, e.g. for creates
// that failed and will therefore never be observed.
func (e *Expectations) LowerCreations(key string, n int) {
	if n <= 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.records[key]
	if !ok {
		return
	}
	r.pendingCreations -= n
	if r.pendingCreations < 0 {
		r.pendingCreations = 0
	}
	if r.empty() {
		delete(e.records, key)
	}
}

// ExpectDeletion records that the object with uid is about to be deleted.
// It must be called before the delete request: the delete event can arrive
// before the request returns. Empty UIDs are ignored.
func (e *Expectations) ExpectDeletion(key string, uid types.UID) {
	if uid == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.getOrCreate(key)
	r.pendingDeletions[uid] = struct{}{}
	r.raisedAt = e.now()
}

// DeletionObserved clears the pending deletion of uid; called from the
// informer's delete handler, and after a failed delete request.
func (e *Expectations) DeletionObserved(key string, uid types.UID) {
	if uid == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.records[key]
	if !ok {
		return
	}
	delete(r.pendingDeletions, uid)
	if r.empty() {
		delete(e.records, key)
	}
}

// IsPendingDeletion reports whether uid was deleted by the controller but the
// delete has not been observed yet (and has not timed out).
func (e *Expectations) IsPendingDeletion(key string, uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.get(key)
	if r == nil {
		return false
	}
	_, ok := r.pendingDeletions[uid]
	return ok
}

// Pending returns the pending creations and deletions of key, for logs and
// tests.
func (e *Expectations) Pending(key string) (creations, deletions int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.get(key)
	if r == nil {
		return 0, 0
	}
	return r.pendingCreations, len(r.pendingDeletions)
}

// Forget drops everything known about key, e.g. when its pool is deleted.
func (e *Expectations) Forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.records, key)
}
