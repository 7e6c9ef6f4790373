// Package scale_test measures how cost grows with the number of Sandboxes,
// on a real kube-apiserver, etcd, kube-scheduler and garbage collector with
// simulated nodes (kwok; internal/kwokstack) and the controller as its own
// process. The benchmarks hold the figures; TestScaleCounts holds only
// counts (over-creation, claim-path writes, restart writes, leftovers).
//
//	go test ./test/bench/scale -run '^$' -bench Gate -benchtime 1x -timeout 60m
//	AGENT_SANDBOX_SCALE_SIZES=1000,5000,10000 go test ./test/bench/scale -run '^$' -bench Growth -benchtime 1x -timeout 90m
//	AGENT_SANDBOX_SCALE_SANDBOXES=10000 go test ./test/bench/scale -run '^$' -bench Restart -benchtime 1x -timeout 60m
//
// AGENT_SANDBOX_SCALE_GC_QPS sets the garbage collector's client QPS
// (default 20, kube-controller-manager's default), which bounds mass
// deletions. AGENT_SANDBOX_SCALE_OUT names a directory for each run's JSON results
// and the growth plot (growth.png).
package scale_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/agent-sandbox/internal/bench"
	"sigs.k8s.io/agent-sandbox/internal/kwokstack"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// startStack brings up a kwok stack with nodes simulated nodes.
func startStack(tb testing.TB, nodes int, controllerArgs ...string) (*kwokstack.Stack, bench.ScaleConfig) {
	tb.Helper()
	testenv.SkipShortNeeds(tb, "a kwok cluster (apiserver, kwok, the controller binary)")
	ctrllog.SetLogger(logr.Discard()) // the harness's clients; the controller logs to its own file
	ctx := context.Background()
	st, err := kwokstack.Start(ctx, kwokstack.Options{Nodes: nodes, Log: testLog{tb},
		ControllerArgs: append(append([]string(nil), kwokstack.GateControllerArgs...), controllerArgs...),
		GCQPS:          envInt(tb, "AGENT_SANDBOX_SCALE_GC_QPS", 20)})
	if err != nil {
		tb.Fatalf("starting kwok stack: %v", err)
	}
	tb.Cleanup(func() {
		if err := st.Stop(); err != nil {
			tb.Errorf("stopping kwok stack: %v", err)
		}
	})
	return st, bench.ScaleConfig{
		RestConfig:           st.Config,
		ControllerMetricsURL: st.ControllerMetricsURL,
		ControllerPID:        st.ControllerPID,
		StopController:       st.StopController,
		StartController:      st.StartController,
		Timeout:              20 * time.Minute,
		Log:                  testLog{tb},
	}
}

type testLog struct{ tb testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func envInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func sizes(tb testing.TB) []int {
	tb.Helper()
	v := os.Getenv("AGENT_SANDBOX_SCALE_SIZES")
	if v == "" {
		return []int{1000}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || (len(out) > 0 && n <= out[len(out)-1]) {
			tb.Fatalf("AGENT_SANDBOX_SCALE_SIZES=%q: want growing positive integers", v)
		}
		out = append(out, n)
	}
	return out
}

// save writes results as JSON into $AGENT_SANDBOX_SCALE_OUT, if set.
func save(tb testing.TB, name string, v any) string {
	tb.Helper()
	dir := os.Getenv("AGENT_SANDBOX_SCALE_OUT")
	if dir == "" {
		return ""
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		tb.Fatalf("encoding %s results: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
		tb.Fatal(err)
	}
	return dir
}

func report(b *testing.B, r *bench.ScaleResult, suffix string) {
	b.Helper()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	m := func(v float64, unit string) { b.ReportMetric(v, unit+suffix) }
	m(ms(r.Client.P50), "client_p50_ms")
	m(ms(r.Client.P90), "client_p90_ms")
	m(ms(r.Client.P99), "client_p99_ms")
	if r.CtrlObservations > 0 {
		m(r.CtrlP50, "ctrl_p50_ms")
		m(r.CtrlP90, "ctrl_p90_ms")
		m(r.CtrlP99, "ctrl_p99_ms")
	}
	m(r.WritesPerClaim, "writes/claim")
	m(r.ClaimPathWrites, "claim_path_writes/claim")
	m(r.ControllerCPU, "ctrl_cpu_s")
	m(r.CPUPerClaimMs, "ctrl_cpu_ms/claim")
	if r.BackgroundSeconds > 0 {
		// Growth: the same with the background rate charged out.
		m(r.NetCPUPerClaimMs, "ctrl_net_cpu_ms/claim")
		m(r.APIServerCPUPerClaimMs, "apiserver_cpu_ms/claim")
		m(r.NetAPIServerCPUPerClaimMs, "apiserver_net_cpu_ms/claim")
		m(r.BackgroundControllerCPU, "bg_ctrl_cpu_s")
		m(r.BackgroundAPIServerCPU, "bg_apiserver_cpu_s")
		m(r.BackgroundSeconds, "bg_window_s")
		m(r.BackgroundWrites, "bg_writes")
	}
	m(r.ControllerRSS/(1<<20), "ctrl_rss_MiB")
	m(r.RSSPer1k/(1<<20), "ctrl_rss_MiB/1k_sandboxes")
	m(r.APIServerCPU, "apiserver_cpu_s")
	m(r.APIServerCPUWait, "apiserver_cpu_wait_s")
	m(r.ControllerCPUWait, "ctrl_cpu_wait_s")
	m(r.EtcdBytes/(1<<20), "etcd_MiB")
	for k, v := range r.Extra {
		m(v, k)
	}
	b.Logf("%s: %d Sandboxes, %d claims (%d ready, %d errors, %d warm), load %s",
		r.Scenario, r.Sandboxes, r.Claims, r.Ready, r.Errors, r.Warm, r.Load)
}

// BenchmarkGate is the reference's scalability gate: 100 kwok nodes, a
// warm pool of 1050, claims at 75/s for 10 s; its thresholds are on the
// controller histogram (P50 ≤ 300 ms, P90 ≤ 300 ms, P99 ≤ 500 ms). They
// are printed against the measurement, not asserted (a shared machine's
// timings are not a pass/fail signal).
func BenchmarkGate(b *testing.B) {
	for range b.N {
		st, cfg := startStack(b, 100, "--enable-pprof")
		cfg.Namespaces = 1
		var profiles sync.WaitGroup
		if dir := os.Getenv("AGENT_SANDBOX_SCALE_PROFILE"); dir != "" {
			// CPU profiles of the controller and the apiserver over the
			// claim window: where the time goes when the gate is missed.
			cfg.BeforeClaims = func(ctx context.Context) {
				profiles.Add(2)
				go func() {
					defer profiles.Done()
					saveProfile(b, st.ControllerMetricsURL(), filepath.Join(dir, "controller.pprof"), 12*time.Second)
				}()
				go func() { defer profiles.Done(); saveAPIServerProfile(b, st, filepath.Join(dir, "apiserver.pprof")) }()
			}
		}
		r, err := bench.RunGate(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		report(b, r, "")
		b.Logf("gate thresholds (controller histogram): P50 %.0f/%.0f ms, P90 %.0f/%.0f ms, P99 %.0f/%.0f ms: %s",
			r.CtrlP50, bench.GateP50, r.CtrlP90, bench.GateP90, r.CtrlP99, bench.GateP99, verdict(r))
		save(b, "gate", r)
		profiles.Wait()
	}
}

// saveProfile fetches a CPU profile of d (whole seconds) from the
// controller's metrics server (--enable-pprof).
func saveProfile(b *testing.B, metricsURL, path string, d time.Duration) {
	b.Helper()
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(metricsURL, "/metrics"), int(d.Seconds()))
	resp, err := http.Get(url)
	if err != nil {
		b.Errorf("controller profile: %v", err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Errorf("controller profile: %s %v", resp.Status, err)
		return
	}
	writeProfile(b, path, data)
}

// saveAPIServerProfile fetches a 12 s CPU profile from the apiserver's
// /debug/pprof (kube-apiserver --profiling defaults to on).
func saveAPIServerProfile(b *testing.B, st *kwokstack.Stack, path string) {
	b.Helper()
	cs, err := kubernetes.NewForConfig(st.Config)
	if err != nil {
		b.Error(err)
		return
	}
	data, err := cs.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "12").
		Timeout(30 * time.Second).DoRaw(context.Background())
	if err != nil {
		b.Errorf("apiserver profile: %v", err)
		return
	}
	writeProfile(b, path, data)
}

// writeProfile saves a profile, creating its directory
// (AGENT_SANDBOX_SCALE_PROFILE need not exist yet).
func writeProfile(b *testing.B, path string, data []byte) {
	b.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Error(err)
		return
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Error(err)
	}
}

func verdict(r *bench.ScaleResult) string {
	if r.CtrlP50 <= bench.GateP50 && r.CtrlP90 <= bench.GateP90 && r.CtrlP99 <= bench.GateP99 {
		return "met"
	}
	return "missed"
}

// BenchmarkGrowth fills pools across 10 namespaces to each size of
// AGENT_SANDBOX_SCALE_SIZES (default 1000) in turn, then claims at 25/s
// for 10 s: RSS per 1k Sandboxes, controller CPU per claim, claim latency.
func BenchmarkGrowth(b *testing.B) {
	for range b.N {
		st, cfg := startStack(b, 100, "--enable-pprof")
		var profiles sync.WaitGroup
		if dir := os.Getenv("AGENT_SANDBOX_SCALE_PROFILE"); dir != "" {
			// A controller CPU profile over each size's claim window: where
			// the cost per claim goes as the pools grow; and one over the
			// background window before it (controller-idle-N.pprof), to
			// diff against: what the controller does with no claims.
			sz := sizes(b)
			step, bgStep := 0, 0
			cfg.BeforeClaims = func(ctx context.Context) {
				path := filepath.Join(dir, fmt.Sprintf("controller-%d.pprof", sz[min(step, len(sz)-1)]))
				step++
				profiles.Add(1)
				go func() { defer profiles.Done(); saveProfile(b, st.ControllerMetricsURL(), path, 12*time.Second) }()
			}
			cfg.BeforeBackground = func(ctx context.Context, d time.Duration) {
				path := filepath.Join(dir, fmt.Sprintf("controller-idle-%d.pprof", sz[min(bgStep, len(sz)-1)]))
				bgStep++
				// Shorter than the window by a second so it never runs into
				// the claims, whose profile the controller would refuse (one
				// CPU profile at a time).
				profiles.Add(1)
				go func() { defer profiles.Done(); saveProfile(b, st.ControllerMetricsURL(), path, d-time.Second) }()
			}
		}
		rs, err := bench.RunGrowth(context.Background(), cfg, sizes(b))
		profiles.Wait()
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rs {
			report(b, r, fmt.Sprintf("@%d", r.Sandboxes))
			checkGrowthCounts(b, r)
		}
		if dir := save(b, "growth", rs); dir != "" {
			if err := bench.PlotGrowth(rs, filepath.Join(dir, "growth.png")); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkRestart kills and restarts the controller with
// AGENT_SANDBOX_SCALE_SANDBOXES (default 1000) Sandboxes in pools: time to
// the first claim served and to every pool settled, writes in the first 60 s.
func BenchmarkRestart(b *testing.B) {
	n := envInt(b, "AGENT_SANDBOX_SCALE_SANDBOXES", 1000)
	for range b.N {
		_, cfg := startStack(b, 100)
		r, err := bench.RunRestart(context.Background(), cfg, n, 60*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		report(b, r, "")
		b.Logf("writes in the first 60 s: %v", r.Writes)
		save(b, "restart", r)
		checkRestartCounts(b, r)
	}
}

// BenchmarkMassDelete binds AGENT_SANDBOX_SCALE_SANDBOXES (default 1000)
// claims and deletes them all at once: time and writes until nothing is
// left.
func BenchmarkMassDelete(b *testing.B) {
	n := envInt(b, "AGENT_SANDBOX_SCALE_SANDBOXES", 1000)
	for range b.N {
		_, cfg := startStack(b, 100)
		r, err := bench.RunMassDelete(context.Background(), cfg, n)
		if err != nil {
			b.Fatal(err)
		}
		report(b, r, "")
		b.Logf("deletion writes: %v", r.Writes)
		save(b, "delete", r)
		checkDeleteCounts(b, r)
	}
}

func loadNow() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// BenchmarkScaleAll runs growth (AGENT_SANDBOX_SCALE_SIZES), then the
// restart at the largest size, then the mass deletion of
// AGENT_SANDBOX_SCALE_DELETE (default: half the largest size) claims, on
// one stack, so the big pools are filled once. Results go to
// $AGENT_SANDBOX_SCALE_OUT as growth.json (+ growth.png), restart.json and
// delete.json.
func BenchmarkScaleAll(b *testing.B) {
	sz := sizes(b)
	largest := sz[len(sz)-1]
	del := envInt(b, "AGENT_SANDBOX_SCALE_DELETE", largest/2)
	for range b.N {
		_, cfg := startStack(b, 100)
		ctx := context.Background()
		rs, err := bench.RunGrowth(ctx, cfg, sz)
		for _, r := range rs {
			report(b, r, fmt.Sprintf("@%d", r.Sandboxes))
			checkGrowthCounts(b, r)
		}
		if dir := save(b, "growth", rs); dir != "" && len(rs) > 0 {
			if err := bench.PlotGrowth(rs, filepath.Join(dir, "growth.png")); err != nil {
				b.Error(err)
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		r, err := bench.RunRestart(ctx, cfg, largest, 60*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		report(b, r, "@restart")
		b.Logf("restart writes in the first 60 s: %v", r.Writes)
		save(b, "restart", r)
		checkRestartCounts(b, r)
		r, err = bench.RunMassDelete(ctx, cfg, del)
		if err != nil {
			b.Fatal(err)
		}
		report(b, r, "@delete")
		b.Logf("deletion writes: %v", r.Writes)
		save(b, "delete", r)
		checkDeleteCounts(b, r)
	}
}
