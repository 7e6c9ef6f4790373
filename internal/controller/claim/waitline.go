package claim

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The wait line: while the pool refills, a claim that finds no adoptable
// member but sees members already starting takes the next one that gets
// its pod IP, in the order the claims arrived, instead of starting one more
// pod of its own. On a busy node a cold pod competes for the CPU with the
// refill's pods and is Ready after them, so waiting is the faster path as
// long as a member is on its way for this claim. It goes cold only when
// none is: the claims ahead of it already account for every starting
// member (the pool cannot refill: at its size, its template broken, its
// members failing), or the wait bound passed.
//
// Positions are counted, not promised: a claim may take an adoptable
// member only while there are more adoptable members than claims ahead of
// it, and may wait only while adoptable plus starting members, plus the
// members the pool is still to create, outnumber the claims ahead of it.
// So N waiters never wait on fewer than N members, and a claim that
// arrives later never overtakes one that waits. A claim working on a
// member it took (holding) is not ahead of anyone: the member it holds is
// no longer counted either.
//
// The members still to create are the pool's deficit (spec.replicas minus
// the members queued for it), counted only while this process's pool
// controller reports that it refills the pool (refillPromise): on a busy
// node the pool's creates come seconds after the adoptions that caused
// them, and a claim arriving in between would otherwise go cold although
// its member is on its way. A member a claim holds is not queued, so its
// replacement counts as soon as it is taken.

// waiter is one claim in a pool's line.
type waiter struct {
	uid   types.UID
	seq   uint64
	since time.Time
	// holding: the claim popped a candidate in its current pass and has
	// not yet adopted it or given it back.
	holding bool
}

// Verdict is what Take tells a claim to do.
type Verdict int

const (
	// Took: adopt TakeResult.Candidate.
	Took Verdict = iota + 1
	// Wait: a member that is starting is the claim's; requeue.
	Wait
	// Cold: no member is on its way for this claim.
	Cold
)

// TakeResult is Take's decision and the counts it was made from (for the
// claim's events and logs).
type TakeResult struct {
	Verdict   Verdict
	Candidate Candidate
	// Ahead is the number of waiting claims before this one, Adoptable the
	// members with a pod IP, InFlight the pool's members still starting,
	// Refill the members the pool is still to create.
	Ahead, Adoptable, InFlight, Refill int
	// Since is when the claim joined the line; Joined is true in the call
	// that put it there.
	Since  time.Time
	Joined bool
}

// why describes the counts behind a verdict.
func (t TakeResult) why() string {
	if t.Adoptable == 0 && t.InFlight == 0 && t.Ahead == 0 && t.Refill == 0 {
		return "no pool member is starting"
	}
	return fmt.Sprintf("%d claims wait ahead of it for %d starting and %d adoptable pool members and %d the pool is still to create",
		t.Ahead, t.InFlight, t.Adoptable, t.Refill)
}

// refillPromise is what a claim's pass knows of the pool's refill: the
// live pool's UID and spec.replicas, and whether this process's pool
// controller reports that it creates the pool's deficit now.
type refillPromise struct {
	poolUID   types.UID
	desired   int
	refilling bool
	// held counts the pool's Ready members the asking claim has popped in
	// this pass and will push back because its env cannot be delivered
	// there. They are out of the queue only for the moment; counting them
	// as missing would promise the claim a refill the pool never makes,
	// and it would wait for nothing (until --sandbox-claim-warm-wait).
	held int
}

// refillLocked is the number of members the pool is still to create for
// promise: its deficit, when it refills and none of its members failed
// (a template whose Pods fail makes replacements that fail too).
func (p *poolQueue) refillLocked(promise refillPromise) int {
	if !promise.refilling || p.failed[promise.poolUID] > 0 {
		return 0
	}
	return max(0, promise.desired-p.owned[promise.poolUID]-promise.held)
}

// Take decides, under the queue's lock, whether the claim adopts a
// candidate now (popping it, as Pop does), waits in the pool's line for a
// starting member or one the pool is about to create, or goes cold
// (leaving the line). Only candidates controlled by promise.poolUID, not
// failed and accepted by the queue's inFlight predicate count as starting:
// a Sandbox a tenant planted with copied labels cannot make claims wait
// (it only lowers the pool's deficit, which sends claims cold sooner).
//
// It costs O(log n) for the pick plus a pass over the members without an
// IP and over the line, which the refill in progress bounds, not the
// pool's size.
func (q *CandidateQueue) Take(pool string, promise refillPromise, claim types.NamespacedName, claimUID types.UID, now time.Time) TakeResult {
	q.mu.Lock()
	defer q.mu.Unlock()
	poolUID := promise.poolUID
	line := q.lines[pool]
	w := line[claim]
	if w != nil && w.uid != claimUID {
		// A new claim of the same name: the old one's place is gone.
		delete(line, claim)
		w = nil
	}
	if w != nil {
		w.holding = false
	}
	var res TakeResult
	for k, o := range line {
		if k != claim && !o.holding && (w == nil || o.seq < w.seq) {
			res.Ahead++
		}
	}
	p := q.poolLocked(pool)
	p.promise = promise
	res.Adoptable = p.adoptable
	for _, e := range p.unnetworked {
		if e.OwnerUID == poolUID && !e.Failed && (q.inFlight == nil || q.inFlight(&e.Candidate)) {
			res.InFlight++
		}
	}
	res.Refill = p.refillLocked(promise)
	switch {
	case res.Adoptable > res.Ahead:
		// Pop order puts every candidate with an IP before those without.
		res.Candidate, _ = q.popLocked(pool)
		res.Verdict = Took
		if w != nil {
			w.holding = true
		}
	case res.Adoptable+res.InFlight+res.Refill > res.Ahead:
		if w == nil {
			if line == nil {
				line = map[types.NamespacedName]*waiter{}
				q.lines[pool] = line
			}
			q.seq++
			w = &waiter{uid: claimUID, seq: q.seq, since: now}
			line[claim] = w
			res.Joined = true
		}
		res.Verdict, res.Since = Wait, w.since
	default:
		if w != nil {
			res.Since = w.since
			delete(line, claim)
		}
		res.Verdict = Cold
	}
	return res
}

// Release ends the claim's hold on a candidate it took without adopting it
// (an error; the candidate itself goes back with Push).
func (q *CandidateQueue) Release(pool string, claim types.NamespacedName) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w := q.lines[pool][claim]; w != nil {
		w.holding = false
	}
}

// Leave takes the claim out of every line (it is bound, deleted or goes
// cold) and returns the waiting claims that may now take a member.
func (q *CandidateQueue) Leave(claim types.NamespacedName) []types.NamespacedName {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []types.NamespacedName
	for pool, line := range q.lines {
		if _, ok := line[claim]; !ok {
			continue
		}
		delete(line, claim)
		if len(line) == 0 {
			delete(q.lines, pool)
			continue
		}
		out = append(out, q.wakersLocked(pool)...)
	}
	return out
}

// Waiting returns the claims in the pool's line in arrival order; for
// tests and debugging.
func (q *CandidateQueue) Waiting(pool string) []types.NamespacedName {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.orderLocked(pool, false)
}

// orderLocked lists the line's claims by arrival, without those holding a
// candidate when free is set.
func (q *CandidateQueue) orderLocked(pool string, free bool) []types.NamespacedName {
	line := q.lines[pool]
	keys := make([]types.NamespacedName, 0, len(line))
	for k, w := range line {
		if !free || !w.holding {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b types.NamespacedName) int { return cmp.Compare(line[a].seq, line[b].seq) })
	return keys
}

// wakersLocked returns the waiting claims that can take an adoptable
// candidate now: the first as many as there are adoptable candidates. The
// others stay asleep, so a member turning adoptable wakes one claim, not
// the whole line.
func (q *CandidateQueue) wakersLocked(pool string) []types.NamespacedName {
	if len(q.lines[pool]) == 0 {
		return nil
	}
	adoptable := 0
	if p := q.pools[pool]; p != nil {
		adoptable = p.adoptable
	}
	keys := q.orderLocked(pool, true)
	return keys[:min(adoptable, len(keys))]
}

// strandedLocked returns the waiting claims that no adoptable, starting or
// promised candidate is left for, so they decide again (and go cold) at
// once rather than at their next poll.
func (q *CandidateQueue) strandedLocked(pool string) []types.NamespacedName {
	if len(q.lines[pool]) == 0 {
		return nil
	}
	have := 0
	if p := q.pools[pool]; p != nil {
		have = p.adoptable + p.refillLocked(p.promise)
		for _, e := range p.unnetworked {
			if !e.Failed && (q.inFlight == nil || q.inFlight(&e.Candidate)) {
				have++
			}
		}
	}
	keys := q.orderLocked(pool, true)
	if have >= len(keys) {
		return nil
	}
	return keys[have:]
}

// wakersAfterLeave returns the waiting claims that can take a candidate
// now; for a caller whose Take just removed a claim from the line.
func (q *CandidateQueue) wakersAfterLeave(pool string) []types.NamespacedName {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wakersLocked(pool)
}
