package claim

import (
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
		if v := q.Take("ns/p", "pool", c, types.UID(c.Name), base).Verdict; v != Wait {
			t.Fatalf("%s: verdict %v, want Wait", c.Name, v)
		}
	}
	a.HasIPs = true
	got := q.Update("ns/p", a)
	if len(got) != 1 || got[0] != c1 {
		t.Fatalf("woke %v, want only the head of the line %v", got, c1)
	}
	// c2 is woken too early (say by its poll): c1 is ahead, so no.
	if v := q.Take("ns/p", "pool", c2, "c2", base).Verdict; v != Wait {
		t.Fatalf("c2 overtook c1: verdict %v", v)
	}
	if r := q.Take("ns/p", "pool", c1, "c1", base); r.Verdict != Took || r.Candidate.Name != "a" {
		t.Fatalf("c1: %+v", r)
	}
	// c1 holds a; once it leaves the line c2 is the head.
	q.Leave(c1)
	if got := q.Waiting("ns/p"); len(got) != 1 || got[0] != c2 {
		t.Fatalf("line %v", got)
	}
	// b is owned by another pool UID: it does not count for c3.
	if v := q.Take("ns/p", "other-pool", types.NamespacedName{Namespace: "ns", Name: "c3"}, "c3", base).Verdict; v != Cold {
		t.Fatalf("c3 waits on a member of another pool: %v", v)
	}
}
