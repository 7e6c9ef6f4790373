package claim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

var base = time.Unix(1000, 0)

func cand(name string, ready, ips bool, node string, ageSec int) Candidate {
	return Candidate{Name: name, Ready: ready, HasIPs: ips, NodeName: node, Created: base.Add(-time.Duration(ageSec) * time.Second)}
}

func popAll(q *CandidateQueue, pool string) []string {
	var out []string
	for {
		c, ok := q.Pop(pool)
		if !ok {
			return out
		}
		out = append(out, c.Name)
	}
}

func TestQueueOrder(t *testing.T) {
	cases := []struct {
		name string
		in   []Candidate
		want []string
	}{
		{"oldest Ready first (FIFO)", []Candidate{cand("b", true, true, "", 5), cand("a", true, true, "", 9), cand("c", true, true, "", 1)}, []string{"a", "b", "c"}},
		{"younger Ready before older unready", []Candidate{cand("old", false, true, "", 100), cand("young", true, true, "", 1)}, []string{"young", "old"}},
		{"networked before unnetworked", []Candidate{cand("noip", false, false, "", 100), cand("ip", false, true, "", 1)}, []string{"ip", "noip"}},
		{"equal creation times in arrival order", []Candidate{cand("x", true, true, "", 0), cand("y", true, true, "", 0), cand("z", true, true, "", 0)}, []string{"x", "y", "z"}},
		{"node with most ready candidates first", []Candidate{
			cand("n1-a", true, true, "n1", 10), cand("n2-a", true, true, "n2", 9), cand("n2-b", true, true, "n2", 8),
		}, []string{"n2-a", "n1-a", "n2-b"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := NewCandidateQueue()
			for _, x := range c.in {
				q.Push("ns/p", x)
			}
			got := popAll(q, "ns/p")
			if len(got) != len(c.want) {
				t.Fatalf("popped %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("popped %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestQueueDedupUpdateRemove(t *testing.T) {
	q := NewCandidateQueue()
	q.Push("ns/p", cand("a", false, false, "", 0))
	q.Push("ns/p", cand("a", true, true, "n1", 0)) // same key: refreshed in place
	if q.Len("ns/p") != 1 {
		t.Fatalf("dedup failed: %d entries", q.Len("ns/p"))
	}
	if s := q.Snapshot("ns/p"); !s[0].Ready || s[0].NodeName != "n1" {
		t.Fatalf("entry not refreshed: %+v", s[0])
	}
	// Update never re-adds a candidate that a worker popped.
	c, _ := q.Pop("ns/p")
	q.Update("ns/p", c)
	if q.Len("ns/p") != 0 {
		t.Fatal("Update re-added a popped candidate")
	}
	q.Push("ns/p", cand("b", true, true, "", 0))
	q.Remove("ns/p", "b") // ghost removal on delete
	if _, ok := q.Pop("ns/p"); ok {
		t.Fatal("removed candidate popped")
	}
	q.Push("ns/p", cand("c", true, true, "", 0))
	q.RemovePool("ns/p")
	if q.Len("ns/p") != 0 {
		t.Fatal("RemovePool kept entries")
	}
}

func TestQueueIsolatesPoolsAndNamespaces(t *testing.T) {
	if PoolKey("ns", "p") != "ns/p" {
		t.Fatalf("key = %q", PoolKey("ns", "p"))
	}
	q := NewCandidateQueue()
	q.Push(PoolKey("a", "p"), cand("x", true, true, "", 0))
	if _, ok := q.Pop(PoolKey("b", "p")); ok {
		t.Fatal("popped another namespace's candidate")
	}
	if _, ok := q.Pop(PoolKey("a", "q")); ok {
		t.Fatal("popped another pool's candidate")
	}
}

func TestQueueWakesTheHeadWaiterWhenACandidateGetsAnIP(t *testing.T) {
	q := NewCandidateQueue()
	c1 := types.NamespacedName{Namespace: "ns", Name: "c1"}
	c2 := types.NamespacedName{Namespace: "ns", Name: "c2"}
	a, b := cand("a", false, false, "", 2), cand("b", false, false, "", 1)
	a.OwnerUID, b.OwnerUID = "pool", "pool"
	q.Push("ns/p", a)
	q.Push("ns/p", b)
	for _, c := range []types.NamespacedName{c1, c2} {
		if v := q.Take("ns/p", refillPromise{poolUID: "pool"}, c, types.UID(c.Name), base).Verdict; v != Wait {
			t.Fatalf("%s: verdict %v, want Wait", c.Name, v)
		}
	}
	a.HasIPs = true
	got := q.Update("ns/p", a)
	if len(got) != 1 || got[0] != c1 {
		t.Fatalf("woke %v, want only the head of the line %v", got, c1)
	}
	// c2 is woken too early (say by its poll): c1 is ahead, so no.
	if v := q.Take("ns/p", refillPromise{poolUID: "pool"}, c2, "c2", base).Verdict; v != Wait {
		t.Fatalf("c2 overtook c1: verdict %v", v)
	}
	if r := q.Take("ns/p", refillPromise{poolUID: "pool"}, c1, "c1", base); r.Verdict != Took || r.Candidate.Name != "a" {
		t.Fatalf("c1: %+v", r)
	}
	// c1 holds a; once it leaves the line c2 is the head.
	q.Leave(c1)
	if got := q.Waiting("ns/p"); len(got) != 1 || got[0] != c2 {
		t.Fatalf("line %v", got)
	}
	// b is owned by another pool UID: it does not count for c3.
	if v := q.Take("ns/p", refillPromise{poolUID: "other-pool"}, types.NamespacedName{Namespace: "ns", Name: "c3"}, "c3", base).Verdict; v != Cold {
		t.Fatalf("c3 waits on a member of another pool: %v", v)
	}
}

// refPick is the pick as a full scan states it (the queue's order,
// spelled out): Ready first, then networked, then the rest; among Ready
// the node with the most Ready candidates (none for an unreported node),
// then the oldest, then the first to arrive.
func refPick(items map[string]Candidate, seqs map[string]int) (string, bool) {
	perNode := map[string]int{}
	for _, c := range items {
		if c.Ready && c.NodeName != "" {
			perNode[c.NodeName]++
		}
	}
	rank := func(c Candidate) int {
		switch {
		case c.Ready:
			return 0
		case c.HasIPs:
			return 1
		}
		return 2
	}
	better := func(a, b Candidate) bool {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		if a.Ready && perNode[a.NodeName] != perNode[b.NodeName] {
			return perNode[a.NodeName] > perNode[b.NodeName]
		}
		if !a.Created.Equal(b.Created) {
			return a.Created.Before(b.Created)
		}
		return seqs[a.Name] < seqs[b.Name]
	}
	var best *Candidate
	for _, c := range items {
		if best == nil || better(c, *best) {
			c := c
			best = &c
		}
	}
	if best == nil {
		return "", false
	}
	return best.Name, true
}

// The indexed queue picks exactly what the full scan picks, through any
// interleaving of arrivals, refreshes (readiness, IPs, node changes),
// removals and pops, and keeps its counts in step.
func TestQueuePicksAsTheFullScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	q := NewCandidateQueue()
	items := map[string]Candidate{}
	seqs := map[string]int{}
	next := 0
	random := func(name string) Candidate {
		return Candidate{
			Name: name, Ready: rng.IntN(2) == 0, HasIPs: rng.IntN(3) > 0,
			NodeName: []string{"", "n1", "n2", "n3"}[rng.IntN(4)],
			// Coarse times, so ties fall to arrival order.
			Created:  base.Add(time.Duration(rng.IntN(5)) * time.Second),
			OwnerUID: "pool", Failed: rng.IntN(10) == 0,
		}
	}
	for step := range 20000 {
		name := fmt.Sprintf("m%d", rng.IntN(60))
		switch op := rng.IntN(10); {
		case op < 4: // arrival or refresh in place
			c := random(name)
			if _, ok := items[name]; !ok {
				next++
				seqs[name] = next
			}
			items[name] = c
			q.Push("ns/p", c)
		case op < 6: // refresh only if queued
			c := random(name)
			if _, ok := items[name]; ok {
				items[name] = c
			}
			q.Update("ns/p", c)
		case op < 7:
			delete(items, name)
			q.Remove("ns/p", name)
		default:
			want, wok := refPick(items, seqs)
			got, gok := q.Pop("ns/p")
			if wok != gok || want != got.Name {
				t.Fatalf("step %d: popped %q (%v), full scan picks %q (%v)", step, got.Name, gok, want, wok)
			}
			delete(items, want)
		}
		if q.Len("ns/p") != len(items) {
			t.Fatalf("step %d: %d queued, want %d", step, q.Len("ns/p"), len(items))
		}
		p := q.pools["ns/p"]
		if p == nil {
			if len(items) != 0 {
				t.Fatalf("step %d: no pool queue for %d items", step, len(items))
			}
			continue
		}
		adoptable, failed := 0, 0
		for _, c := range items {
			if c.HasIPs {
				adoptable++
			}
			if c.Failed {
				failed++
			}
		}
		if p.adoptable != adoptable || p.owned["pool"] != len(items) || p.failed["pool"] != failed || len(p.byName)-len(p.unnetworked) != adoptable {
			t.Fatalf("step %d: counts adoptable %d owned %d failed %d, want %d %d %d", step, p.adoptable, p.owned["pool"], p.failed["pool"], adoptable, len(items), failed)
		}
	}
}

// A pool that refills counts its deficit as members on their way: with
// nothing queued, as many claims as the pool lacks wait, the next goes
// cold; a failed member, a pool that does not refill, or a member of a
// different pool UID (which fills no slot of this pool) change that.
func TestTakeCountsTheRefillStillToCreate(t *testing.T) {
	claim := func(i int) (types.NamespacedName, types.UID) {
		n := fmt.Sprintf("c%d", i)
		return types.NamespacedName{Namespace: "ns", Name: n}, types.UID(n)
	}
	refilling := refillPromise{poolUID: "pool", desired: 3, refilling: true}
	q := NewCandidateQueue()
	for i := range 3 {
		k, u := claim(i)
		if r := q.Take("ns/p", refilling, k, u, base); r.Verdict != Wait || r.Refill != 3 || r.Ahead != i {
			t.Fatalf("c%d: %+v, want Wait with 3 to create and %d ahead", i, r, i)
		}
	}
	k, u := claim(3)
	if r := q.Take("ns/p", refilling, k, u, base); r.Verdict != Cold {
		t.Fatalf("c3 waits for more members than the pool lacks: %+v", r)
	}
	// The pool creates one: it is starting now, and no longer to create.
	m := cand("m1", false, false, "", 0)
	m.OwnerUID = "pool"
	q.Push("ns/p", m)
	if r := q.Take("ns/p", refilling, types.NamespacedName{Namespace: "ns", Name: "c2"}, "c2", base); r.Verdict != Wait || r.InFlight != 1 || r.Refill != 2 {
		t.Fatalf("c2 after the first create: %+v", r)
	}
	// Not refilling (template missing, replenish delay, failed creates):
	// only the starting member counts, so the third waiter goes cold.
	if r := q.Take("ns/p", refillPromise{poolUID: "pool", desired: 3}, types.NamespacedName{Namespace: "ns", Name: "c2"}, "c2", base); r.Verdict != Cold || r.Refill != 0 {
		t.Fatalf("c2 with a pool that does not refill: %+v", r)
	}
	// A failed member: replacements would fail too.
	f := cand("f", false, false, "", 0)
	f.OwnerUID, f.Failed = "pool", true
	q.Push("ns/p", f)
	if r := q.Take("ns/p", refilling, types.NamespacedName{Namespace: "ns", Name: "c1"}, "c1", base); r.Verdict != Cold || r.Refill != 0 {
		t.Fatalf("c1 with a failed member: %+v", r)
	}
	q.Remove("ns/p", "f")
	// A member of another pool UID (an older pool of the same name) fills
	// no slot of this one.
	o := cand("o", false, false, "", 0)
	o.OwnerUID = "old-pool"
	q.Push("ns/p", o)
	if r := q.Take("ns/p", refilling, types.NamespacedName{Namespace: "ns", Name: "c0"}, "c0", base); r.Verdict != Wait || r.Refill != 2 || r.InFlight != 1 {
		t.Fatalf("c0 beside another pool's member: %+v", r)
	}
}

// A Ready member the claim popped and will push back (its env cannot be
// delivered there) is not missing from the pool: a full pool promises no
// refill, so the claim goes cold at once instead of waiting for nothing.
func TestTakeDoesNotCountHeldMembersAsRefill(t *testing.T) {
	q := NewCandidateQueue()
	m := cand("m1", true, true, "", 0)
	m.OwnerUID = "pool"
	q.Push("ns/p", m)
	promise := refillPromise{poolUID: "pool", desired: 1, refilling: true}
	k := types.NamespacedName{Namespace: "ns", Name: "env-claim"}
	r := q.Take("ns/p", promise, k, "env-claim", base)
	if r.Verdict != Took || r.Candidate.Name != "m1" {
		t.Fatalf("first take: %+v, want m1", r)
	}
	promise.held++
	if r := q.Take("ns/p", promise, k, "env-claim", base); r.Verdict != Cold || r.Refill != 0 {
		t.Fatalf("with the only member held: %+v, want Cold with nothing to create", r)
	}
	promise.held = 0
	if r := q.Take("ns/p", promise, k, "env-claim", base); r.Verdict != Wait || r.Refill != 1 {
		t.Fatalf("without the hold (a member really missing): %+v, want Wait for one to create", r)
	}
}
