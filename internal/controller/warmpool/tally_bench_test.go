package warmpool

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
)

// BenchmarkPoolPass is the cost of one pool pass after one member changed,
// full (list and classify every member, the old pass) against incremental
// (re-classify the changed member), on the real apiserver's informer
// cache, by pool size:
//
//	go test ./internal/controller/warmpool -run '^$' -bench PoolPass -benchtime 200x
//
// The changed member is recorded as the handler would; the pass writes
// nothing (the counts do not change), so this is the pass's own cost.
// cpu-ns/op is the process's CPU time per pass (user+system, including the
// informers' background work): on a shared machine it is steadier than the
// wall-clock ns/op.
func BenchmarkPoolPass(b *testing.B) {
	for _, n := range []int{100, 1000} {
		f := newFixture(b, Options{MaxBatchSize: 1000})
		f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", int32(n)))
		f.converge("p")
		ms := f.members("p")
		for i := range ms {
			f.markReady(&ms[i])
		}
		f.settle("p")
		f.reconcile("p")
		if st := f.pool("p").Status; int(st.ReadyReplicas) != n {
			b.Fatalf("pool of %d: status %+v", n, st)
		}
		changed := ms[n/2]
		for _, mode := range []string{"full", "incremental"} {
			b.Run(fmt.Sprintf("%s/members=%d", mode, n), func(b *testing.B) {
				full, inc := f.r.fullPasses.Load(), f.r.incrementalPasses.Load()
				cpu0 := processCPU(b)
				for range b.N {
					f.r.recordMember(clientKey(f.ns, "p"), &changed)
					if mode == "full" {
						f.r.members.markFull(f.key("p"))
					}
					f.reconcile("p")
				}
				b.StopTimer()
				b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
				if mode == "full" && f.r.fullPasses.Load()-full != int64(b.N) ||
					mode == "incremental" && f.r.incrementalPasses.Load()-inc != int64(b.N) {
					b.Fatalf("%s: %d full and %d incremental passes for %d", mode,
						f.r.fullPasses.Load()-full, f.r.incrementalPasses.Load()-inc, b.N)
				}
			})
		}
	}
}

// processCPU is this process's user+system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
