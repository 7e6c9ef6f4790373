// Package claim_test benchmarks warm claims on a real kube-apiserver with
// the Sandbox controller, the extension controllers and the kubelet
// stand-in running: claim created -> claim observed Ready (p50/p90/p99), and
// apiserver writes per claim, split into the claim path (what serving the
// claim costs) and the refill (what putting a replacement into the pool
// costs).
//
//	go test ./test/bench/claim -run '^$' -bench . -benchtime 1x
//
// Latency is measured by the client: from just before the Create request
// to the moment a watch delivers the claim with Ready=True, so it includes
// the create round trip and both watch deliveries. Writes are counted on the
// wire (every POST/PUT/PATCH/DELETE the controllers and the kubelet send).
package claim_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/bench"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest/harness"
	"sigs.k8s.io/agent-sandbox/internal/controller/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
	"sigs.k8s.io/agent-sandbox/internal/transport"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	testenv.Main(m, &env)
}

// scenario is one measured run.
type scenario struct {
	pool     int32
	claims   int
	interval time.Duration // between claim creates; 0 = all at once
	opts     extensions.Options
	// transport shapes the measured manager's API connections.
	transport transport.Options
	// sandbox configures the measured Sandbox controller (nil: defaults).
	sandbox *sandbox.Options
	// waitRefill waits for the pool to be full again after the claims, so
	// that every refill write is counted.
	waitRefill bool
}

type result struct {
	latencies      []time.Duration
	warm, cold     int
	claimPath      []exttest.Write
	refill         []exttest.Write
	claimPathByRes string
}

var defaults = extensions.Options{EnableWarmPoolEviction: true}

// BenchmarkWarmClaimSustained100PerSecond: 3000 claims at 100/s (30 s)
// against a pool of 3000. The refill is paced at 10 sandboxes/s
// (--sandbox-warm-pool-max-refill-rate) so that the apiserver's capacity
// goes to serving claims: on this machine it cannot also absorb a refill
// of 100 sandboxes/s (see BenchmarkWarmClaimRate for the unpaced curve).
func BenchmarkWarmClaimSustained100PerSecond(b *testing.B) {
	opts := defaults
	opts.MaxRefillRate = 10
	runBench(b, scenario{pool: 3000, claims: 3000, interval: 10 * time.Millisecond, opts: opts})
}

// BenchmarkWarmClaimBurst300: 300 claims at once against a Ready pool of
// 300: default settings; the refill held until the burst has passed
// (--sandbox-warm-pool-replenish-delay=500ms), which keeps the refill's
// writes (about six per Sandbox) out of the claims' way; and the API
// traffic spread over 4 connections with watches on a fifth
// (--api-connections=4 --separate-watch-connection); and the Pod relabels
// held back (--sandbox-write-behind-window=1s).
func BenchmarkWarmClaimBurst300(b *testing.B) {
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			s := scenario{pool: 300, claims: 300, opts: defaults, waitRefill: true}
			v.apply(&s)
			runBench(b, s)
		})
	}
}

// variants are the controller settings the burst and rate benchmarks compare.
var variants = []struct {
	name  string
	apply func(*scenario)
}{
	{"default", func(*scenario) {}},
	{"replenish-delay=500ms", func(s *scenario) { s.opts.ReplenishDelay = 500 * time.Millisecond }},
	{"api-connections=4+watch", func(s *scenario) { s.transport = transport.Options{Connections: 4, SeparateWatch: true} }},
	{"write-behind=1s", func(s *scenario) {
		s.sandbox = &sandbox.Options{Workers: 100, StatusCoalesceWindow: time.Second, WriteBehindWindow: time.Second}
	}},
}

// BenchmarkWarmClaimRate sweeps sustained arrival rates for 15 s each
// (pool of four seconds of claims, unpaced refill), with default settings
// and with the API traffic spread over connections.
func BenchmarkWarmClaimRate(b *testing.B) {
	for _, rate := range []int{10, 25, 50} {
		for _, v := range []int{0, 2} {
			b.Run(fmt.Sprintf("rate=%d/%s", rate, variants[v].name), func(b *testing.B) {
				s := scenario{pool: int32(4 * rate), claims: 15 * rate, interval: time.Second / time.Duration(rate),
					opts: defaults, waitRefill: true}
				variants[v].apply(&s)
				runBench(b, s)
			})
		}
	}
}

func runBench(b *testing.B, s scenario) {
	b.Helper()
	mgrWrites, kubeletWrites := &exttest.WriteCounter{}, &exttest.WriteCounter{}
	exttest.StartKubelet(b, env, nil, kubeletWrites)
	var all result
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := runOnce(b, s, mgrWrites, kubeletWrites)
		all.latencies = append(all.latencies, r.latencies...)
		all.warm += r.warm
		all.cold += r.cold
		all.claimPath = append(all.claimPath, r.claimPath...)
		all.refill = append(all.refill, r.refill...)
		b.Logf("claim-path writes: %s", r.claimPathByRes)
	}
	b.StopTimer()
	sum := bench.Summarize(all.latencies)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	n := float64(len(all.latencies))
	b.ReportMetric(ms(sum.P50), "p50_ms")
	b.ReportMetric(ms(sum.P90), "p90_ms")
	b.ReportMetric(ms(sum.P99), "p99_ms")
	b.ReportMetric(ms(sum.Max), "max_ms")
	warm := float64(max(all.warm, 1))
	ext := 0
	for _, w := range all.claimPath {
		// The extension controllers' share: the adoption patch and the
		// claim status; the rest is the Sandbox controller's Pod relabel
		// (and Sandbox status when adoption bumped the generation).
		if w.Resource == "sandboxes" || strings.HasPrefix(w.Resource, "sandboxclaims") {
			ext++
		}
	}
	b.ReportMetric(float64(len(all.claimPath))/warm, "writes/warm-claim")
	b.ReportMetric(float64(ext)/warm, "ext-writes/warm-claim")
	if want := 3.0; float64(len(all.claimPath))/warm > want {
		// Not a timing assertion: a write budget, exact on the wire.
		b.Errorf("%.2f writes per warm claim, budget %.0f", float64(len(all.claimPath))/warm, want)
	}
	b.ReportMetric(float64(len(all.refill))/n, "refill-writes/claim")
	b.ReportMetric(float64(all.cold), "cold-claims")
}

func runOnce(b *testing.B, s scenario, mgrWrites, kubeletWrites *exttest.WriteCounter) result {
	b.Helper()
	b.StopTimer()
	ctx := context.Background()
	c := env.Client
	ns := exttest.Namespace(b, c, "bench")
	// Fill the pool at full speed, then measure with a fresh controller
	// configured as the scenario says (refill shaping applies to the run,
	// not to the initial fill).
	fillOpts := s.opts
	fillOpts.MaxRefillRate, fillOpts.ReplenishDelay = 0, 0
	filler := harness.StartManager(b, env, harness.ManagerOptions{Writes: mgrWrites, Extensions: fillOpts})
	exttest.Create(b, c, exttest.NewTemplate(ns, "tmpl"), exttest.NewPool(ns, "pool", "tmpl", s.pool))
	exttest.Eventually(b, 10*time.Minute, func() error { return exttest.PoolReady(c, ns, "pool", s.pool) })
	filler.Stop()
	mgr := harness.StartManager(b, env, harness.ManagerOptions{Writes: mgrWrites, Extensions: s.opts, Transport: s.transport, Sandbox: s.sandbox})
	defer mgr.Stop()
	time.Sleep(time.Second) // let the start-up passes settle
	// Readiness is observed through an informer on its own connection (a
	// custom dialer makes client-go skip its shared transport): an
	// informer re-lists and re-watches if the apiserver drops a slow
	// watcher during the burst, where a bare watch would just end.
	wcfg := rest.CopyConfig(env.Config)
	wcfg.Dial = (&net.Dialer{}).DialContext
	obs, err := cache.New(wcfg, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		b.Fatal(err)
	}
	obsCtx, stopObs := context.WithCancel(ctx)
	defer stopObs()
	inf, err := obs.GetInformer(obsCtx, &extv1beta1.SandboxClaim{})
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	started := map[string]time.Time{}
	ready := map[string]time.Time{}
	allReady := make(chan struct{})
	observe := func(obj any) {
		cl, ok := obj.(*extv1beta1.SandboxClaim)
		if !ok || !meta.IsStatusConditionTrue(cl.Status.Conditions, sandboxv1beta1.SandboxConditionReady) {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if _, seen := ready[cl.Name]; !seen {
			ready[cl.Name] = now
			if len(ready) == s.claims {
				close(allReady)
			}
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, n any) { observe(n) },
	}); err != nil {
		b.Fatal(err)
	}
	go func() { _ = obs.Start(obsCtx) }()
	if !obs.WaitForCacheSync(obsCtx) {
		b.Fatal("observer cache did not sync")
	}

	mgrWrites.Reset()
	kubeletWrites.Reset()
	b.StartTimer()
	begin := time.Now()
	profileDone := profileAPIServer(b, s)
	defer func() { <-profileDone }()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := 0; i < s.claims; i++ {
		if s.interval > 0 {
			if d := time.Until(begin.Add(time.Duration(i) * s.interval)); d > 0 {
				time.Sleep(d)
			}
		}
		name := fmt.Sprintf("c-%05d", i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t0 := time.Now()
			mu.Lock()
			started[name] = t0
			mu.Unlock()
			if err := c.Create(ctx, exttest.NewClaim(ns, name, "pool")); err != nil {
				b.Errorf("creating claim: %v", err)
			}
		}()
	}
	wg.Wait()
	select {
	case <-allReady:
	case <-time.After(5 * time.Minute):
		var cl extv1beta1.SandboxClaimList
		_ = c.List(ctx, &cl, client.InNamespace(ns))
		bound := 0
		for _, x := range cl.Items {
			if meta.IsStatusConditionTrue(x.Status.Conditions, "Ready") {
				bound++
			}
		}
		b.Fatalf("only %d/%d claims Ready by watch, %d by list", len(ready), s.claims, bound)
	}
	b.StopTimer()
	if s.waitRefill {
		// Wait for the refill so that its writes are all counted.
		exttest.Eventually(b, 10*time.Minute, func() error { return exttest.PoolReady(c, ns, "pool", s.pool) })
	}
	time.Sleep(2 * time.Second)

	var r result
	mu.Lock()
	for name, t1 := range ready {
		r.latencies = append(r.latencies, t1.Sub(started[name]))
	}
	mu.Unlock()
	var claims extv1beta1.SandboxClaimList
	if err := c.List(ctx, &claims, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	warmSandboxes := map[string]bool{}
	for _, cl := range claims.Items {
		if cl.Status.SandboxStatus.Name == cl.Name {
			r.cold++
		} else {
			r.warm++
			warmSandboxes[cl.Status.SandboxStatus.Name] = true
		}
	}
	writes := append(mgrWrites.Writes(), kubeletWrites.Writes()...)
	sort.Slice(writes, func(i, j int) bool { return writes[i].At.Before(writes[j].At) })
	adoptedAt := map[string]time.Time{}
	for _, w := range writes {
		if w.Verb == "patch" && w.Resource == "sandboxes" && warmSandboxes[w.Name] {
			if _, ok := adoptedAt[w.Name]; !ok {
				adoptedAt[w.Name] = w.At
			}
		}
	}
	r.claimPath, r.refill = exttest.SplitClaimPath(writes, adoptedAt)
	// Status writes of claims that went cold are the cold path's, not the
	// warm claim path's.
	warmClaim := map[string]bool{}
	for _, cl := range claims.Items {
		if cl.Status.SandboxStatus.Name != cl.Name {
			warmClaim[cl.Name] = true
		}
	}
	kept := r.claimPath[:0]
	for _, w := range r.claimPath {
		if strings.HasPrefix(w.Resource, "sandboxclaims") && !warmClaim[w.Name] {
			continue
		}
		kept = append(kept, w)
	}
	r.claimPath = kept
	r.claimPathByRes = exttest.Summary(r.claimPath) + "; refill: " + exttest.Summary(r.refill)
	b.Logf("where a warm claim's time goes: %s", breakdown(claims.Items, writes, started, ready))
	// Stop refilling this namespace before the next run.
	_ = c.DeleteAllOf(ctx, &extv1beta1.SandboxWarmPool{}, client.InNamespace(ns))
	if strings.Contains(os.Getenv("BENCH_VERBOSE"), "1") {
		s := bench.Summarize(r.latencies)
		b.Logf("n=%d p50=%s p90=%s p99=%s max=%s warm=%d cold=%d", s.Count, s.P50, s.P90, s.P99, s.Max, r.warm, r.cold)
	}
	return r
}

// profileAPIServer captures a CPU profile of the test apiserver over the
// measured window when AGENT_SANDBOX_BENCH_APISERVER_PROFILE names a
// directory: where the apiserver spends its time decides what a write costs.
// Read it with `go tool pprof -top <file>`.
func profileAPIServer(b *testing.B, s scenario) <-chan struct{} {
	b.Helper()
	done := make(chan struct{})
	dir := os.Getenv("AGENT_SANDBOX_BENCH_APISERVER_PROFILE")
	if dir == "" {
		close(done)
		return done
	}
	seconds := max(int(time.Duration(s.claims)*s.interval/time.Second), 5)
	out := filepath.Join(dir, strings.NewReplacer("/", "_", "=", "-").Replace(b.Name())+".pprof")
	go func() {
		defer close(done)
		cs, err := kubernetes.NewForConfig(env.Config)
		if err != nil {
			b.Errorf("apiserver profile: %v", err)
			return
		}
		data, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(seconds)).Timeout(time.Duration(seconds+30) * time.Second).DoRaw(context.Background())
		if err != nil {
			b.Errorf("apiserver profile: %v", err)
			return
		}
		if err := os.WriteFile(out, data, 0o644); err != nil {
			b.Errorf("apiserver profile: %v", err)
			return
		}
		b.Logf("apiserver CPU profile (%ds): %s", seconds, out)
	}()
	return done
}

// breakdown splits each warm claim's latency into the steps of its critical
// path, from the client's create to its watch seeing Ready: the controller
// reacting (watch delivery and queueing up to the adoption patch), the
// adoption patch round trip, the gap to the claim status write, that
// write's round trip, and the delivery of the result to the client.
func breakdown(claims []extv1beta1.SandboxClaim, writes []exttest.Write, started, ready map[string]time.Time) string {
	adopt := map[string]exttest.Write{}
	status := map[string]exttest.Write{}
	for _, w := range writes {
		switch {
		case w.Resource == "sandboxes" && w.Verb == "patch":
			if _, ok := adopt[w.Name]; !ok {
				adopt[w.Name] = w
			}
		case w.Resource == "sandboxclaims/status":
			if _, ok := status[w.Name]; !ok {
				status[w.Name] = w
			}
		}
	}
	var react, patch, gap, write, deliver []time.Duration
	for _, cl := range claims {
		sb := cl.Status.SandboxStatus.Name
		a, okA := adopt[sb]
		st, okS := status[cl.Name]
		t0, t1 := started[cl.Name], ready[cl.Name]
		if sb == cl.Name || !okA || !okS || t0.IsZero() || t1.IsZero() {
			continue
		}
		react = append(react, a.At.Sub(t0))
		patch = append(patch, a.Took)
		gap = append(gap, st.At.Sub(a.At.Add(a.Took)))
		write = append(write, st.Took)
		deliver = append(deliver, t1.Sub(st.At.Add(st.Took)))
	}
	var parts []string
	for _, step := range []struct {
		name string
		d    []time.Duration
	}{{"react", react}, {"adopt-patch", patch}, {"to-status", gap}, {"status-write", write}, {"deliver", deliver}} {
		sum := bench.Summarize(step.d)
		parts = append(parts, fmt.Sprintf("%s p50 %s p99 %s", step.name, sum.P50.Round(100*time.Microsecond), sum.P99.Round(100*time.Microsecond)))
	}
	return strings.Join(parts, "; ")
}
