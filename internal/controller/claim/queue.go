package claim

import (
	"container/heap"
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
// Every operation costs O(log n) in the pool's size n (pickLocked), not a
// pass over the pool: at 10k members a scan per claim cost milliseconds of
// CPU under the lock every claim and every informer event takes.
//
// Beside the candidates the queue keeps, per pool, the line of claims
// waiting for a member that is still starting (waitline.go).
type CandidateQueue struct {
	mu    sync.Mutex
	pools map[string]*poolQueue
	seq   uint64
	lines map[string]map[types.NamespacedName]*waiter
	// inFlight decides whether a candidate without an IP counts as a
	// member on its way for waiting claims (nil: every one does).
	inFlight func(*Candidate) bool
}

// poolQueue is one pool's candidates, indexed for the pick and counted for
// the wait line.
type poolQueue struct {
	byName map[string]*entry
	// Ready candidates, grouped by node; nodes orders the groups so that
	// the best candidate is the head of nodes[0].
	groups map[string]*nodeGroup
	nodes  nodeHeap
	// networked: pod IPs but not Ready; starting: neither.
	networked, starting candHeap
	// unnetworked holds every candidate without an IP (Ready or not), the
	// ones Take counts as starting: their number is the refill in
	// progress, not the pool's size.
	unnetworked map[string]*entry
	adoptable   int
	// owned and failed count candidates per controlling pool UID, for the
	// pool's refill still to be created (waitline.go).
	owned, failed map[types.UID]int
	// promise is the refill last reported by Take, so that a removal can
	// tell which waiters are left without a member (strandedLocked).
	promise refillPromise
}

func newPoolQueue() *poolQueue {
	return &poolQueue{
		byName: map[string]*entry{}, groups: map[string]*nodeGroup{}, unnetworked: map[string]*entry{},
		owned: map[types.UID]int{}, failed: map[types.UID]int{},
	}
}

// entry is a queued candidate and where it sits.
type entry struct {
	Candidate
	idx   int        // in the heap that holds it
	group *nodeGroup // Ready candidates only
}

// older orders candidates oldest first, then in arrival order.
func older(a, b *entry) bool {
	if !a.Created.Equal(b.Created) {
		return a.Created.Before(b.Created)
	}
	return a.seq < b.seq
}

// candHeap is a min-heap of candidates by age (container/heap).
type candHeap []*entry

func (h candHeap) Len() int           { return len(h) }
func (h candHeap) Less(i, j int) bool { return older(h[i], h[j]) }
func (h candHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *candHeap) Push(x any) {
	e := x.(*entry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *candHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

// nodeGroup is the Ready candidates on one node ("" = not reported).
type nodeGroup struct {
	name    string
	members candHeap
	idx     int // in nodeHeap
}

// weight is how many Ready candidates the node holds; candidates without a
// node share no node, so they weigh nothing.
func (g *nodeGroup) weight() int {
	if g.name == "" {
		return 0
	}
	return len(g.members)
}

// nodeHeap orders node groups: the most Ready candidates first, then the
// one whose oldest candidate is older. Its head's head is the candidate the
// old full scan picked: within a node all candidates weigh the same, so the
// best of a node is its oldest.
type nodeHeap []*nodeGroup

func (h nodeHeap) Len() int { return len(h) }
func (h nodeHeap) Less(i, j int) bool {
	if wi, wj := h[i].weight(), h[j].weight(); wi != wj {
		return wi > wj
	}
	return older(h[i].members[0], h[j].members[0])
}
func (h nodeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *nodeHeap) Push(x any) {
	g := x.(*nodeGroup)
	g.idx = len(*h)
	*h = append(*h, g)
}
func (h *nodeHeap) Pop() any {
	old := *h
	g := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return g
}

// insert files e under its state.
func (p *poolQueue) insert(e *entry) {
	p.byName[e.Name] = e
	p.owned[e.OwnerUID]++
	if e.Failed {
		p.failed[e.OwnerUID]++
	}
	if e.HasIPs {
		p.adoptable++
	} else {
		p.unnetworked[e.Name] = e
	}
	switch {
	case e.Ready:
		g := p.groups[e.NodeName]
		if g == nil {
			g = &nodeGroup{name: e.NodeName}
			p.groups[e.NodeName] = g
			heap.Push(&g.members, e)
			heap.Push(&p.nodes, g)
		} else {
			heap.Push(&g.members, e)
			heap.Fix(&p.nodes, g.idx)
		}
		e.group = g
	case e.HasIPs:
		heap.Push(&p.networked, e)
	default:
		heap.Push(&p.starting, e)
	}
}

// remove undoes insert.
func (p *poolQueue) remove(e *entry) {
	delete(p.byName, e.Name)
	if p.owned[e.OwnerUID]--; p.owned[e.OwnerUID] <= 0 {
		delete(p.owned, e.OwnerUID)
	}
	if e.Failed {
		if p.failed[e.OwnerUID]--; p.failed[e.OwnerUID] <= 0 {
			delete(p.failed, e.OwnerUID)
		}
	}
	if e.HasIPs {
		p.adoptable--
	} else {
		delete(p.unnetworked, e.Name)
	}
	switch {
	case e.group != nil:
		g := e.group
		heap.Remove(&g.members, e.idx)
		if len(g.members) == 0 {
			heap.Remove(&p.nodes, g.idx)
			delete(p.groups, g.name)
		} else {
			heap.Fix(&p.nodes, g.idx)
		}
		e.group = nil
	case e.HasIPs:
		heap.Remove(&p.networked, e.idx)
	default:
		heap.Remove(&p.starting, e.idx)
	}
}

// best is the candidate Pop hands out, or nil.
func (p *poolQueue) best() *entry {
	switch {
	case len(p.nodes) > 0:
		return p.nodes[0].members[0]
	case len(p.networked) > 0:
		return p.networked[0]
	case len(p.starting) > 0:
		return p.starting[0]
	}
	return nil
}

// NewCandidateQueue returns an empty queue.
func NewCandidateQueue() *CandidateQueue {
	return &CandidateQueue{pools: map[string]*poolQueue{}, lines: map[string]map[types.NamespacedName]*waiter{}}
}

// PoolKey is the queue key of a pool.
func PoolKey(namespace, pool string) string { return namespace + "/" + pool }

// poolLocked returns the pool's queue, created on first use.
func (q *CandidateQueue) poolLocked(pool string) *poolQueue {
	p := q.pools[pool]
	if p == nil {
		p = newPoolQueue()
		q.pools[pool] = p
	}
	return p
}

// Push adds c to the pool's queue or, when it is there already, refreshes
// its state in place (keeping its position). It returns the claims waiting
// for a candidate of that pool when c is adoptable now (it has IPs), and
// forgets them: the caller enqueues them.
func (q *CandidateQueue) Push(pool string, c Candidate) []types.NamespacedName {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.poolLocked(pool)
	if cur, ok := p.byName[c.Name]; ok {
		c.seq = cur.seq
		p.remove(cur)
	} else {
		q.seq++
		c.seq = q.seq
	}
	p.insert(&entry{Candidate: c})
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
	p := q.pools[pool]
	if p == nil {
		return nil
	}
	cur, ok := p.byName[c.Name]
	if !ok {
		return nil
	}
	c.seq = cur.seq
	p.remove(cur)
	p.insert(&entry{Candidate: c})
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
	p := q.pools[pool]
	if p == nil {
		return Candidate{}, false
	}
	e := p.best()
	if e == nil {
		return Candidate{}, false
	}
	p.remove(e)
	return e.Candidate, true
}

// Remove drops a candidate, e.g. when its Sandbox is deleted or claimed.
// It returns the waiting claims that lost the member they waited for, so
// the caller wakes them to decide again (most go cold).
func (q *CandidateQueue) Remove(pool, name string) []types.NamespacedName {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.pools[pool]
	if p == nil {
		return nil
	}
	e, ok := p.byName[name]
	if !ok {
		return nil
	}
	p.remove(e)
	if e.HasIPs {
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
	if p := q.pools[pool]; p != nil {
		return len(p.byName)
	}
	return 0
}

// Snapshot returns a copy of the pool's queued candidates in Pop order; for
// tests and debugging.
func (q *CandidateQueue) Snapshot(pool string) []Candidate {
	tmp := newPoolQueue()
	q.mu.Lock()
	if p := q.pools[pool]; p != nil {
		for _, e := range p.byName {
			tmp.insert(&entry{Candidate: e.Candidate})
		}
	}
	q.mu.Unlock()
	out := make([]Candidate, 0, len(tmp.byName))
	for e := tmp.best(); e != nil; e = tmp.best() {
		tmp.remove(e)
		out = append(out, e.Candidate)
	}
	return out
}
