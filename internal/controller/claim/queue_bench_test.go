package claim

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// benchPool fills a pool of n Ready members spread over nodes, as a warm
// pool of n looks to the claim controller between refills.
func benchPool(n, nodes int) *CandidateQueue {
	q := NewCandidateQueue()
	for i := range n {
		q.Push("ns/p", Candidate{
			Name: fmt.Sprintf("m%05d", i), Ready: true, HasIPs: true,
			NodeName: fmt.Sprintf("node%03d", i%nodes), Created: base.Add(time.Duration(i) * time.Millisecond),
			UID: types.UID(fmt.Sprintf("uid%05d", i)), OwnerUID: "pool",
		})
	}
	return q
}

// BenchmarkQueuePick is one claim's pick: pop the best member of a pool of
// n Ready members on 10 nodes and push it back (the pool's replacement, a
// new arrival), so the pool keeps its size. It is the part of a warm
// claim's pass that grows with the pool.
func BenchmarkQueuePick(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("pool=%d", n), func(b *testing.B) {
			q := benchPool(n, 10)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				c, ok := q.Pop("ns/p")
				if !ok {
					b.Fatal("empty")
				}
				q.Push("ns/p", c)
			}
		})
	}
}

// BenchmarkQueueTake is the same pick through Take, the call a claim's
// pass makes: it also counts what the pool has on its way for the line.
func BenchmarkQueueTake(b *testing.B) {
	claim := types.NamespacedName{Namespace: "ns", Name: "c"}
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("pool=%d", n), func(b *testing.B) {
			q := benchPool(n, 10)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				t := q.Take("ns/p", refillPromise{poolUID: "pool"}, claim, "c", base)
				if t.Verdict != Took {
					b.Fatalf("verdict %v", t.Verdict)
				}
				q.Push("ns/p", t.Candidate)
			}
		})
	}
}
