package scale_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/router"
)

// BenchmarkRouterIndex holds the router's route table (internal/router
// Index) at AGENT_SANDBOX_SCALE_SANDBOXES (default 10000) Sandboxes with
// one Ready Pod each, fed the records its informers would produce (no
// apiserver here: this is the index's own cost). It reports the heap the
// table holds per 1k Sandboxes, the time to resolve a sandbox (the op),
// and the time to apply a mass suspend (every Sandbox updated to
// Suspended) until every route is withdrawn.
func BenchmarkRouterIndex(b *testing.B) {
	n := envInt(b, "AGENT_SANDBOX_SCALE_SANDBOXES", 10000)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	idx := router.NewIndex()
	recs := make([]*router.SandboxRecord, n)
	for i := range n {
		key := router.SandboxKey{Namespace: fmt.Sprintf("scale-%02d", i%10), Name: fmt.Sprintf("sb-%05d", i)}
		uid := fmt.Sprintf("uid-sb-%d", i)
		ip := fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)
		recs[i] = &router.SandboxRecord{Key: key, UID: uid, ResourceVersion: "1", Ready: true, ReadySince: time.Now(),
			PodIPs: []string{ip}, Ports: []uint16{8888, 8080, 9090}}
		idx.UpsertSandbox(recs[i])
		idx.UpsertPod(&router.PodRecord{Namespace: key.Namespace, Name: key.Name, UID: "uid-pod-" + uid, OwnerUID: uid,
			Ready: true, PodIPs: []string{ip}})
	}
	held := heap() - before
	for i := range 100 {
		if s := idx.Lookup(recs[i*n/100].Key); s == nil || !s.Routable {
			b.Fatalf("sandbox %v not routable after load", recs[i*n/100].Key)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if s := idx.Lookup(recs[i%n].Key); s == nil {
			b.Fatal("lookup miss")
		}
	}
	b.StopTimer()
	start := time.Now()
	for _, r := range recs {
		s := *r
		s.Suspended, s.ResourceVersion = true, "2"
		idx.UpsertSandbox(&s)
	}
	suspend := time.Since(start)
	routable := 0
	idx.Range(func(s *router.Snapshot) {
		if s.Routable {
			routable++
		}
	})
	if routable != 0 {
		b.Fatalf("%d routes left after suspending every sandbox", routable)
	}
	b.ReportMetric(float64(held)/float64(n)*1000/(1<<20), "index_MiB/1k_sandboxes")
	b.ReportMetric(float64(suspend)/float64(time.Millisecond), "mass_suspend_ms")
	b.ReportMetric(float64(n), "sandboxes")
}
