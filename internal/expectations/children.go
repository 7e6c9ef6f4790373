package expectations

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Children remembers, per owner, the named children (a Sandbox's Pod,
// Service, PVCs) the owner's controller created or deleted but its
// informer cache has not shown yet. Where Expectations counts anonymous
// creates for a set sized from a list, a Sandbox has exactly one child of
// each name, so each pending write is tracked by the child's name and, for
// a delete, by the UID being deleted.
//
// Every entry is bound to the owner's UID, not just its name: an event
// about a child controlled by an earlier Sandbox of the same name never
// satisfies the current one's expectations, and the current one never
// waits on the earlier one's.
type Children struct {
	mu      sync.Mutex
	owners  map[string]*owner
	timeout time.Duration
	now     func() time.Time
}

type owner struct {
	uid     types.UID
	pending map[string]pendingWrite
}

// pendingWrite is one create or delete not yet seen in the cache.
type pendingWrite struct {
	// deleting is the UID of the object being deleted; empty for a create.
	deleting types.UID
	at       time.Time
}

// NewChildren returns an empty tracker whose entries expire after timeout
// (≤0 means DefaultTimeout).
func NewChildren(timeout time.Duration) *Children {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Children{owners: map[string]*owner{}, timeout: timeout, now: time.Now}
}

// SetClock replaces the time source; for tests.
func (c *Children) SetClock(now func() time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}

// entry returns the owner record of key for ownerUID, creating it (and
// dropping one left by an earlier owner of the same key). Callers hold the
// lock.
func (c *Children) entry(key string, ownerUID types.UID) *owner {
	o, ok := c.owners[key]
	if !ok || o.uid != ownerUID {
		o = &owner{uid: ownerUID, pending: map[string]pendingWrite{}}
		c.owners[key] = o
	}
	return o
}

// ExpectCreation records that child is about to be created for the owner
// (key, ownerUID). It must be called before the create request: the add
// event can arrive before the request returns.
func (c *Children) ExpectCreation(key string, ownerUID types.UID, child string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entry(key, ownerUID).pending[child] = pendingWrite{at: c.now()}
}

// ExpectDeletion records that child, the object with uid, is about to be
// deleted. Like ExpectCreation, it is called before the request. Empty
// UIDs are ignored.
func (c *Children) ExpectDeletion(key string, ownerUID types.UID, child string, uid types.UID) {
	if uid == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entry(key, ownerUID).pending[child] = pendingWrite{deleting: uid, at: c.now()}
}

// CreationObserved clears the pending create of child; called from the
// informer's add handler for a child controlled by ownerUID.
func (c *Children) CreationObserved(key string, ownerUID types.UID, child string) {
	c.clear(key, ownerUID, child, func(p pendingWrite) bool { return p.deleting == "" })
}

// DeletionObserved clears the pending delete of child when it is for the
// object with uid; called from the informer's handlers once the cache
// shows that object terminating or gone.
func (c *Children) DeletionObserved(key string, ownerUID types.UID, child string, uid types.UID) {
	if uid == "" {
		return
	}
	c.clear(key, ownerUID, child, func(p pendingWrite) bool { return p.deleting == uid })
}

// Cancel drops whatever is pending for child: the request failed, or its
// outcome (AlreadyExists, NotFound) means no event of ours will follow.
func (c *Children) Cancel(key string, ownerUID types.UID, child string) {
	c.clear(key, ownerUID, child, func(pendingWrite) bool { return true })
}

func (c *Children) clear(key string, ownerUID types.UID, child string, match func(pendingWrite) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.owners[key]
	if !ok || o.uid != ownerUID {
		return
	}
	if p, ok := o.pending[child]; ok && match(p) {
		delete(o.pending, child)
	}
	if len(o.pending) == 0 {
		delete(c.owners, key)
	}
}

// Wait returns 0 when every write issued for the owner (key, ownerUID) has
// been observed, and otherwise how long until the oldest unobserved one
// times out: the controller waits for the informer event (which re-enqueues
// the owner) and, should that event never come, looks again after that
// delay. Entries that timed out, or belong to an earlier owner of the key,
// are dropped.
func (c *Children) Wait(key string, ownerUID types.UID) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.owners[key]
	if !ok {
		return 0
	}
	if o.uid != ownerUID {
		delete(c.owners, key)
		return 0
	}
	now := c.now()
	var wait time.Duration
	for child, p := range o.pending {
		left := c.timeout - now.Sub(p.at)
		if left <= 0 {
			delete(o.pending, child)
			continue
		}
		if wait == 0 || left < wait {
			wait = left
		}
	}
	if len(o.pending) == 0 {
		delete(c.owners, key)
	}
	return wait
}

// Pending lists the children with unobserved writes of the owner, for logs
// and tests.
func (c *Children) Pending(key string, ownerUID types.UID) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.owners[key]
	if !ok || o.uid != ownerUID {
		return nil
	}
	out := make([]string, 0, len(o.pending))
	for child := range o.pending {
		out = append(out, child)
	}
	return out
}

// Forget drops everything known about key, e.g. when its owner is gone.
func (c *Children) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.owners, key)
}

// Len is the number of owners with pending writes; a leak check for tests.
func (c *Children) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.owners)
}
