package claim

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Candidate is what the queue knows about an adoptable pool Sandbox, as last
// reported by the Sandbox informer. The claim re-reads the Sandbox from the
// cache before adopting it; these fields only order the queue.
type Candidate struct {
	Name     string
	Ready    bool
	HasIPs   bool
	NodeName string
	Created  time.Time
	// UID and OwnerUID identify the member and the pool that controls it:
	// only a member this process's pool controller vouched for, of the
	// live pool, counts as in flight for waiting claims (see Take).
	UID      types.UID
	OwnerUID types.UID
	// Failed: the Sandbox reports its Pod failed; it will never turn
	// Ready, so no claim waits for it.
	Failed bool
	// seq breaks ties between equal creation times (one-second precision)
	// in arrival order.
	seq uint64
}

// CandidateQueue holds, per pool ("<namespace>/<pool>"), the Sandboxes a
// claim may adopt. It is fed by the Sandbox informer, so a claim finds a
// candidate without listing anything. Pop hands each candidate to exactly
// one caller; a caller that does not adopt it puts it back with Push.
//
// Order: Ready first, then networked but not yet Ready, then the rest.
// Among Ready candidates the node holding the most of them goes first
// (spreading claimed sandboxes across nodes), then the oldest.
//
// Beside the candidates the queue keeps, per pool, the line of claims
// waiting for a member that is still starting (waitline.go).
type CandidateQueue struct {
	mu    sync.Mutex
	pools map[string]map[string]*Candidate
	seq   uint64
	lines map[string]map[types.NamespacedName]*waiter
	// inFlight decides whether a candidate without an IP counts as a
	// member on its way for waiting claims (nil: every one does).
	inFlight func(*Candidate) bool
}

// NewCandidateQueue returns an empty queue.
func NewCandidateQueue() *CandidateQueue {
	return &CandidateQueue{pools: map[string]map[string]*Candidate{}, lines: map[string]map[types.NamespacedName]*waiter{}}
}

// PoolKey is the queue key of a pool.
func PoolKey(namespace, pool string) string { return namespace + "/" + pool }

// Push adds c to the pool's queue or, when it is there already, refreshes
// its state in place (keeping its position). It returns the claims waiting
// for a candidate of that pool when c is adoptable now (it has IPs), and
// forgets them: the caller enqueues them.
func (q *CandidateQueue) Push(pool string, c Candidate) []types.NamespacedName {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.pools[pool]
	if items == nil {
		items = map[string]*Candidate{}
		q.pools[pool] = items
	}
	if cur, ok := items[c.Name]; ok {
		c.seq = cur.seq
	} else {
		q.seq++
		c.seq = q.seq
	}
	stored := c
	items[c.Name] = &stored
	if !c.HasIPs {
		return nil
	}
	return q.wakersLocked(pool)
}

// Update refreshes c only if it is queued; it never re-adds a candidate a
// worker has popped and may be adopting right now.
func (q *CandidateQueue) Update(pool string, c Candidate) []types.NamespacedName {
	q.mu.Lock()
	defer q.mu.Unlock()
	cur, ok := q.pools[pool][c.Name]
	if !ok {
		return nil
	}
	c.seq = cur.seq
	*cur = c
	if !c.HasIPs {
		return nil
	}
	return q.wakersLocked(pool)
}

// Pop removes and returns the best candidate of the pool, if any.
func (q *CandidateQueue) Pop(pool string) (Candidate, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.popLocked(pool)
}

func (q *CandidateQueue) popLocked(pool string) (Candidate, bool) {
	items := q.pools[pool]
	if len(items) == 0 {
		return Candidate{}, false
	}
	readyPerNode := map[string]int{}
	for _, c := range items {
		if c.Ready && c.NodeName != "" {
			readyPerNode[c.NodeName]++
		}
	}
	var best *Candidate
	for _, c := range items {
		if best == nil || better(c, best, readyPerNode) {
			best = c
		}
	}
	delete(items, best.Name)
	return *best, true
}

func rank(c *Candidate) int {
	switch {
	case c.Ready:
		return 0
	case c.HasIPs:
		return 1
	}
	return 2
}

func better(a, b *Candidate, readyPerNode map[string]int) bool {
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra < rb
	}
	if a.Ready {
		if na, nb := readyPerNode[a.NodeName], readyPerNode[b.NodeName]; na != nb {
			return na > nb
		}
	}
	if !a.Created.Equal(b.Created) {
		return a.Created.Before(b.Created)
	}
	return a.seq < b.seq
}

// Remove drops a candidate, e.g. when its Sandbox is deleted or claimed.
// It returns the waiting claims that lost the member they waited for, so
// the caller wakes them to decide again (most go cold).
func (q *CandidateQueue) Remove(pool, name string) []types.NamespacedName {
	q.mu.Lock()
	defer q.mu.Unlock()
	c, ok := q.pools[pool][name]
	if !ok {
		return nil
	}
	delete(q.pools[pool], name)
	if c.HasIPs {
		return nil
	}
	return q.strandedLocked(pool)
}

// RemovePool drops a whole pool's queue when the pool is deleted.
func (q *CandidateQueue) RemovePool(pool string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.pools, pool)
	delete(q.lines, pool)
}

// Len returns the number of queued candidates of a pool.
func (q *CandidateQueue) Len(pool string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pools[pool])
}

// Snapshot returns a copy of the pool's queued candidates in Pop order; for
// tests and debugging.
func (q *CandidateQueue) Snapshot(pool string) []Candidate {
	q.mu.Lock()
	items := make(map[string]*Candidate, len(q.pools[pool]))
	for k, v := range q.pools[pool] {
		c := *v
		items[k] = &c
	}
	q.mu.Unlock()
	tmp := &CandidateQueue{pools: map[string]map[string]*Candidate{pool: items}}
	var out []Candidate
	for {
		c, ok := tmp.Pop(pool)
		if !ok {
			return out
		}
		out = append(out, c)
	}
}
