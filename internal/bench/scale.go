package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// Scale scenario names (`agent-sandbox bench --scenario ...`).
const (
	ScaleGate    = "scale-gate"    // the reference's gate: pool 1050, 75 claims/s for 10 s
	ScaleGrowth  = "scale-growth"  // pools of N across namespaces, then 25 claims/s
	ScaleRestart = "scale-restart" // controller restart with N Sandboxes
	ScaleDelete  = "scale-delete"  // mass deletion of N claims
)

// ControllerHistogram is the controller-observed claim latency histogram
// the reference's scalability gate puts its thresholds on (spec §4.7,
// §6.1): P50 ≤ 300 ms, P90 ≤ 300 ms, P99 ≤ 500 ms.
const ControllerHistogram = "agent_sandbox_claim_controller_startup_latency_ms"

// Gate thresholds on ControllerHistogram, in milliseconds.
const (
	GateP50, GateP90, GateP99 = 300.0, 300.0, 500.0
)

// ScaleConfig describes the cluster a scale scenario drives.
type ScaleConfig struct {
	RestConfig *rest.Config
	// ControllerMetricsURL returns the running controller's /metrics
	// (it changes across a restart); nil or "" skips controller figures.
	ControllerMetricsURL func() string
	// ControllerPID returns the running controller's process ID (0 when
	// stopped). When set, peak RSS is sampled from /proc instead of by
	// scraping /metrics 5 times a second: each scrape runs the
	// agent_sandboxes collector over every cached Sandbox, a cost that
	// grows with the pool and would be charged to the claims.
	ControllerPID func() int
	// StopController and StartController restart the controller (the
	// restart scenario needs both).
	StopController  func()
	StartController func(context.Context) error
	// Namespaces the pools are spread over (default 10; the gate uses 1).
	Namespaces int
	// Timeout bounds each wait (pool fill, claims Ready, deletion).
	Timeout time.Duration
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// BeforeClaims, when set, is called as a claim window opens (e.g. to
	// start CPU profiles covering it).
	BeforeClaims func(ctx context.Context)
	// BeforeBackground, when set, is called as the growth scenario's
	// background window (d long, no claims) opens.
	BeforeBackground func(ctx context.Context, d time.Duration)
}

// ScaleResult is what one scale measurement found. Durations in
// milliseconds, sizes in bytes, CPU in seconds.
type ScaleResult struct {
	Scenario  string `json:"scenario"`
	Sandboxes int    `json:"sandboxes"`
	Claims    int    `json:"claims"`
	Ready     int    `json:"ready"`
	Errors    int    `json:"errors"`
	Warm      int    `json:"warm"`
	// Client is claim create -> Ready as the client observed it.
	Client Summary `json:"client_latency"`
	// Ctrl* are quantiles of ControllerHistogram over the window,
	// estimated from its buckets as the reference's gate does.
	CtrlP50          float64 `json:"controller_p50_ms"`
	CtrlP90          float64 `json:"controller_p90_ms"`
	CtrlP99          float64 `json:"controller_p99_ms"`
	CtrlObservations float64 `json:"controller_observations"`
	// Writes are the apiserver's write requests in the window.
	Writes RequestCounts `json:"apiserver_writes"`
	// FailedWrites are those of Writes the apiserver answered with an
	// error (AlreadyExists, NotFound, Conflict...).
	FailedWrites    RequestCounts `json:"apiserver_failed_writes,omitempty"`
	WritesPerClaim  float64       `json:"writes_per_claim"`
	ClaimPathWrites float64       `json:"claim_path_writes_per_claim"`
	ControllerCPU   float64       `json:"controller_cpu_seconds"`
	CPUPerClaimMs   float64       `json:"controller_cpu_ms_per_claim"`
	// APIServerCPUPerClaimMs is APIServerCPU per claim (gross, like
	// CPUPerClaimMs).
	APIServerCPUPerClaimMs float64 `json:"apiserver_cpu_ms_per_claim,omitempty"`
	// Background* are a window of BackgroundSeconds with no claims,
	// measured right before the claim window once the cluster had settled
	// (growth only): what the controller and the apiserver spend anyway.
	// Net*PerClaimMs charge that rate over the claim window's length out of
	// the gross figures: (gross - rate x window) / claims.
	BackgroundSeconds         float64 `json:"background_window_seconds,omitempty"`
	BackgroundControllerCPU   float64 `json:"background_controller_cpu_seconds,omitempty"`
	BackgroundAPIServerCPU    float64 `json:"background_apiserver_cpu_seconds,omitempty"`
	BackgroundWrites          float64 `json:"background_writes,omitempty"`
	NetCPUPerClaimMs          float64 `json:"controller_net_cpu_ms_per_claim,omitempty"`
	NetAPIServerCPUPerClaimMs float64 `json:"apiserver_net_cpu_ms_per_claim,omitempty"`
	ControllerRSS             float64 `json:"controller_peak_rss_bytes"`
	RSSPer1k                  float64 `json:"controller_rss_bytes_per_1k_sandboxes"`
	APIServerCPU              float64 `json:"apiserver_cpu_seconds"`
	// APIServerCPUWait is the time the apiserver's threads were runnable
	// but waited for a CPU in the window (/proc schedstat): CPU contention,
	// not work. ControllerCPUWait is the controller's.
	APIServerCPUWait  float64 `json:"apiserver_cpu_wait_seconds"`
	ControllerCPUWait float64 `json:"controller_cpu_wait_seconds"`
	EtcdBytes         float64 `json:"etcd_size_bytes"`
	// Extra holds the scenario's own figures (fill time, time to first
	// claim, writes in the first 60 s, leftovers...).
	Extra map[string]float64 `json:"extra,omitempty"`
	// FillStatusTrace attributes the Sandbox status writes of the fill
	// before this measurement (growth only).
	FillStatusTrace *StatusTraceResult `json:"fill_status_trace,omitempty"`
	Elapsed         time.Duration      `json:"elapsed_ns"`
	// Load is /proc/loadavg when the measurement ended: the machine is
	// shared, and the numbers mean little without it.
	Load string `json:"load"`
}

// PoolName and TemplateName are what the scale scenarios create in each
// of their namespaces.
const (
	ScalePoolName     = "scale-pool"
	ScaleTemplateName = "scale-template"
)

// ScaleNamespace is the i-th namespace of the scale scenarios.
func ScaleNamespace(i int) string { return fmt.Sprintf("scale-%02d", i) }

func (cfg *ScaleConfig) defaults() {
	if cfg.Namespaces <= 0 {
		cfg.Namespaces = 10
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.ControllerMetricsURL == nil {
		cfg.ControllerMetricsURL = func() string { return "" }
	}
}

func (cfg *ScaleConfig) logf(format string, args ...any) {
	_, _ = fmt.Fprintf(cfg.Log, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// scaleTemplate is a small pod (kwok runs nothing; the size only matters
// for the API objects and the scheduler).
func scaleTemplate(ns string) *extv1beta1.SandboxTemplate {
	return &extv1beta1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: ScaleTemplateName, Namespace: ns},
		Spec: extv1beta1.SandboxTemplateSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
			PodTemplate: sandboxv1beta1.PodTemplate{
				ObjectMeta: sandboxv1beta1.PodMetadata{Labels: map[string]string{"app": "scale"}},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{
						Name: "runtime", Image: "localhost/agent-sandbox/python-runtime:dev",
						Ports: []corev1.ContainerPort{{Name: "runtime", ContainerPort: 8888}},
					}},
				},
			},
		}},
	}
}

// EnsurePools makes namespaces 0..n-1 each hold a template and a pool of
// perPool replicas, and waits until every pool is full and Ready. It
// returns how long the fill took.
func EnsurePools(ctx context.Context, c client.Client, n int, perPool int32, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for i := range n {
		ns := ScaleNamespace(i)
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
		if err := c.Create(ctx, scaleTemplate(ns)); err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, fmt.Errorf("creating template in %s: %w", ns, err)
		}
		pool := &extv1beta1.SandboxWarmPool{
			ObjectMeta: metav1.ObjectMeta{Name: ScalePoolName, Namespace: ns},
			Spec: extv1beta1.SandboxWarmPoolSpec{Replicas: ptr.To(perPool),
				SandboxTemplateRef: extv1beta1.SandboxTemplateRef{Name: ScaleTemplateName}},
		}
		err := c.Create(ctx, pool)
		if apierrors.IsAlreadyExists(err) {
			err = scalePool(ctx, c, pool, perPool)
		}
		if err != nil {
			return 0, fmt.Errorf("pool in %s: %w", ns, err)
		}
	}
	for i := range n {
		pool := &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: ScalePoolName, Namespace: ScaleNamespace(i)}}
		if err := waitPool(ctx, c, pool, perPool, timeout-time.Since(start)); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// window measures what happens between begin and end: apiserver writes
// and CPU, controller CPU, peak RSS and the controller histogram.
type window struct {
	cfg     *ScaleConfig
	rc      *rest.Config
	api0    *Samples
	writes0 RequestCounts
	failed0 RequestCounts
	ctrl0   *Samples
	ctrlURL string
	peak    *peakSampler
	start   time.Time
	apiErr  error
	// apiPID and ctrlPID are the processes whose schedstat the window
	// reads (0: not found); sched0 are their readings at the start.
	apiPID, ctrlPID       int
	apiSched0, ctrlSched0 SchedStat
}

var apiMetrics = []string{"process_cpu_seconds_total", "apiserver_storage_size_bytes"}
var ctrlMetrics = []string{"process_cpu_seconds_total", "process_resident_memory_bytes", ControllerHistogram,
	"workqueue_depth", "controller_runtime_reconcile_total"}

func (cfg *ScaleConfig) begin(ctx context.Context) *window {
	w := &window{cfg: cfg, rc: cfg.RestConfig, start: time.Now(), ctrlURL: cfg.ControllerMetricsURL()}
	w.api0, w.apiErr = scrapeAPIServer(ctx, w.rc, apiMetrics...)
	if w.apiErr == nil {
		w.writes0, w.apiErr = ScrapeAPIServerWrites(ctx, w.rc)
	}
	if w.apiErr == nil {
		w.failed0, w.apiErr = ScrapeAPIServerFailedWrites(ctx, w.rc)
	}
	if w.ctrlURL != "" {
		w.ctrl0, _ = scrapeURL(ctx, w.ctrlURL, ctrlMetrics...)
	}
	w.peak = cfg.peakSampler(ctx)
	if w.apiPID = findAPIServerPID(w.rc.Host); w.apiPID > 0 {
		w.apiSched0, _ = ProcSchedStat(w.apiPID)
	}
	if cfg.ControllerPID != nil {
		if w.ctrlPID = cfg.ControllerPID(); w.ctrlPID > 0 {
			w.ctrlSched0, _ = ProcSchedStat(w.ctrlPID)
		}
	}
	return w
}

// end fills r's window figures.
func (w *window) end(ctx context.Context, r *ScaleResult) {
	r.Elapsed = time.Since(w.start)
	r.ControllerRSS = w.peak.stop()
	if w.apiPID > 0 {
		if s, err := ProcSchedStat(w.apiPID); err == nil {
			r.APIServerCPUWait = s.Sub(w.apiSched0).Wait.Seconds()
		}
	}
	// A controller restarted inside the window is another process: its
	// whole wait so far is the window's.
	if w.cfg.ControllerPID != nil {
		if pid := w.cfg.ControllerPID(); pid > 0 {
			before := w.ctrlSched0
			if pid != w.ctrlPID {
				before = SchedStat{}
			}
			if s, err := ProcSchedStat(pid); err == nil {
				r.ControllerCPUWait = s.Sub(before).Wait.Seconds()
			}
		}
	}
	if w.apiErr == nil {
		if api1, err := scrapeAPIServer(ctx, w.rc, apiMetrics...); err == nil {
			r.APIServerCPU = api1.Values["process_cpu_seconds_total"] - w.api0.Values["process_cpu_seconds_total"]
			r.EtcdBytes = api1.Values["apiserver_storage_size_bytes"]
		}
		if after, err := ScrapeAPIServerWrites(ctx, w.rc); err == nil {
			r.Writes = after.Sub(w.writes0)
			delete(r.Writes, "PUT leases")
			delete(r.Writes, "PATCH leases")
			delete(r.Writes, "POST leases")
		}
		if after, err := ScrapeAPIServerFailedWrites(ctx, w.rc); err == nil {
			r.FailedWrites = after.Sub(w.failed0)
		}
	}
	url := w.cfg.ControllerMetricsURL()
	if url != "" {
		if c1, err := scrapeURL(ctx, url, ctrlMetrics...); err == nil {
			before := w.ctrl0
			if url != w.ctrlURL || before == nil {
				before = &Samples{Values: map[string]float64{}, Buckets: map[string]map[float64]float64{}}
			}
			r.ControllerCPU = c1.Values["process_cpu_seconds_total"] - before.Values["process_cpu_seconds_total"]
			h := Histogram(c1.Buckets[ControllerHistogram]).Sub(Histogram(before.Buckets[ControllerHistogram]))
			r.CtrlObservations = h.Count()
			if r.CtrlObservations > 0 { // NaN otherwise, which JSON cannot carry
				r.CtrlP50, r.CtrlP90, r.CtrlP99 = h.Quantile(0.5), h.Quantile(0.9), h.Quantile(0.99)
			}
		}
	}
	if r.Claims > 0 {
		n := float64(r.Claims)
		r.WritesPerClaim = r.Writes.Total() / n
		r.CPUPerClaimMs = r.ControllerCPU * 1000 / n
		r.APIServerCPUPerClaimMs = r.APIServerCPU * 1000 / n
	}
	if r.Sandboxes > 0 {
		r.RSSPer1k = r.ControllerRSS / (float64(r.Sandboxes) / 1000)
	}
	r.Load = loadAvg()
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// claimWindow runs sustained claims at rate for d, spread evenly over the
// first spread namespaces' pools (one Run per pool at rate/spread), inside
// one measurement window.
func (cfg *ScaleConfig) claimWindow(ctx context.Context, name string, sandboxes int, rate float64, d time.Duration, poolSize int32, spread int) (*ScaleResult, error) {
	if cfg.BeforeClaims != nil {
		cfg.BeforeClaims(ctx)
	}
	w := cfg.begin(ctx)
	results := make([]*Result, spread)
	errs := make([]error, spread)
	var wg sync.WaitGroup
	for i := range spread {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = Run(ctx, Config{
				RestConfig: cfg.RestConfig, Namespace: ScaleNamespace(i), WarmPool: ScalePoolName,
				Scenario: Sustained, Rate: rate / float64(spread), Duration: d, PoolSize: poolSize, Timeout: cfg.Timeout,
				Seed: int64(i + 1),
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r := &ScaleResult{Scenario: name, Sandboxes: sandboxes}
	var traces []*ClaimTrace
	for _, res := range results {
		r.Claims += res.Claims
		r.Ready += res.Ready
		r.Errors += res.Errors
		r.Warm += res.Warm
		traces = append(traces, res.Traces...)
	}
	r.Client = MilestoneSummaries(traces)[Ready]
	w.end(ctx, r)
	// Each Run counted every pool's writes; split the window's once.
	split := &Result{Claims: r.Claims, Writes: r.Writes}
	split.splitWrites()
	r.ClaimPathWrites = split.ClaimPathWrites
	return r, nil
}

// waitQuiet waits until the namespaces hold no claim and exactly per
// Sandboxes and Pods each: the previous step's claims are deleted
// asynchronously, and their cascade must not be counted in the next one.
func waitQuiet(ctx context.Context, c client.Client, namespaces int, per int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	want := leftovers{sandboxes: namespaces * per, pods: namespaces * per}
	for {
		got, err := countLeft(ctx, c, namespaces)
		if err == nil && got == want {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("cluster not quiet after %s: %+v, want %+v: %w", timeout, got, want, err)
			}
			return fmt.Errorf("cluster not quiet after %s: %+v, want %+v", timeout, got, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// RunGate is the reference's scalability gate: one pool of 1050, claims
// at 75/s for 10 s (Poisson arrivals; the reference paces evenly).
func RunGate(ctx context.Context, cfg ScaleConfig) (*ScaleResult, error) {
	cfg.defaults()
	c, err := scaleClient(cfg.RestConfig)
	if err != nil {
		return nil, err
	}
	const pool = 1050
	cfg.logf("gate: filling a pool of %d", pool)
	fill, err := EnsurePools(ctx, c, 1, pool, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	cfg.logf("gate: pool full in %s; claims at 75/s for 10s", fill.Round(time.Millisecond))
	r, err := cfg.claimWindow(ctx, ScaleGate, pool, 75, 10*time.Second, pool, 1)
	if err != nil {
		return nil, err
	}
	r.Extra = map[string]float64{"fill_seconds": fill.Seconds()}
	return r, nil
}

// RunGrowth fills pools to each total in sizes (spread over
// cfg.Namespaces), then claims at 25/s for 10 s from namespace 0, and
// reports one result per size. Sizes must grow.
func RunGrowth(ctx context.Context, cfg ScaleConfig, sizes []int) ([]*ScaleResult, error) {
	cfg.defaults()
	c, err := scaleClient(cfg.RestConfig)
	if err != nil {
		return nil, err
	}
	var out []*ScaleResult
	for _, n := range sizes {
		per := int32(n / cfg.Namespaces)
		if len(out) > 0 {
			if err := waitQuiet(ctx, c, cfg.Namespaces, out[len(out)-1].Sandboxes/cfg.Namespaces, cfg.Timeout); err != nil {
				return out, err
			}
		}
		cfg.logf("growth: filling %d pools of %d", cfg.Namespaces, per)
		trace, err := StartStatusTrace(ctx, cfg.RestConfig)
		if err != nil {
			return out, err
		}
		w := cfg.begin(ctx)
		fill, err := EnsurePools(ctx, c, cfg.Namespaces, per, cfg.Timeout)
		if err != nil {
			_, _ = trace.Stop()
			return out, err
		}
		fillRes := &ScaleResult{Sandboxes: n}
		w.end(ctx, fillRes)
		traced, err := trace.Stop()
		if err != nil {
			return out, err
		}
		cfg.logf("growth: Sandbox status writes in the fill: %v PATCH, %v PUT; %s",
			fillRes.Writes["PATCH sandboxes/status"], fillRes.Writes["PUT sandboxes/status"], traced)
		// The fill's tail (status writes after the pools report Ready, the
		// garbage collector removing replaced members) must neither be
		// charged to the claims nor to the background: wait it out.
		settled, err := WaitSettled(ctx, cfg.RestConfig, growthQuiet, cfg.Timeout)
		if err != nil {
			return out, err
		}
		cfg.logf("growth: %d Sandboxes in %s, settled %s later (%d Sandbox/Pod changes); background for %s",
			n, fill.Round(time.Millisecond), settled.Took.Round(time.Millisecond), settled.Events, growthClaimWindow)
		bg, err := cfg.background(ctx, growthClaimWindow)
		if err != nil {
			return out, err
		}
		cfg.logf("growth: background: controller %.2f s, apiserver %.2f s CPU in %s, %v writes; claims at 25/s for %s",
			bg.ControllerCPU, bg.APIServerCPU, bg.Elapsed.Round(time.Millisecond), bg.Writes.Total(), growthClaimWindow)
		r, err := cfg.claimWindow(ctx, ScaleGrowth, n, 25, growthClaimWindow, per, cfg.Namespaces)
		if err != nil {
			return out, err
		}
		r.chargeBackground(bg)
		cfg.logf("growth: %d Sandboxes: controller CPU per claim %.1f ms gross, %.1f ms net; apiserver %.1f ms gross, %.1f ms net (window %s)",
			n, r.CPUPerClaimMs, r.NetCPUPerClaimMs, r.APIServerCPUPerClaimMs, r.NetAPIServerCPUPerClaimMs, r.Elapsed.Round(time.Millisecond))
		// RSS per 1k is what holding the objects costs: the peak of the
		// fill and the claim window, whichever is higher.
		r.ControllerRSS = math.Max(r.ControllerRSS, fillRes.ControllerRSS)
		r.RSSPer1k = r.ControllerRSS / (float64(n) / 1000)
		r.Extra = map[string]float64{
			"fill_seconds": fill.Seconds(), "fill_controller_cpu_seconds": fillRes.ControllerCPU,
			"fill_apiserver_cpu_seconds": fillRes.APIServerCPU,
			"fill_writes_per_sandbox":    fillRes.Writes.Total() / math.Max(1, float64(n-sumPrev(out))),
			// Over-creation shows here: exactly the new Sandboxes, each with one Pod.
			"fill_new_sandboxes":   float64(n - sumPrev(out)),
			"fill_sandbox_creates": fillRes.Writes["POST sandboxes"],
			"fill_pod_creates":     fillRes.Writes["POST pods"],
			// Attributed by traced: patches that made no new version changed nothing.
			"fill_sandbox_status_writes": fillRes.Writes["PATCH sandboxes/status"] + fillRes.Writes["PUT sandboxes/status"] -
				fillRes.FailedWrites["PATCH sandboxes/status"] - fillRes.FailedWrites["PUT sandboxes/status"],
			// Members the pool replaced (stuck past the readiness grace):
			// each costs a Sandbox and a Pod beyond the new replicas.
			"fill_sandbox_deletes":        fillRes.Writes["DELETE sandboxes"],
			"fill_failed_pod_creates":     fillRes.FailedWrites["POST pods"],
			"fill_sandbox_status_changes": float64(traced.Changes),
			"fill_not_ready_rewrites":     float64(traced.NotReadyRewrites),
			"settle_seconds":              settled.Took.Seconds(),
			"settle_changes":              float64(settled.Events),
		}
		r.FillStatusTrace = traced
		out = append(out, r)
	}
	return out, nil
}

// growthClaimWindow is how long the growth scenario claims (at 25/s) and,
// before that, how long its background window lasts; growthQuiet is how
// long no Sandbox or Pod may change before the background is measured.
const (
	growthClaimWindow = 10 * time.Second
	growthQuiet       = 5 * time.Second
)

func sumPrev(out []*ScaleResult) int {
	if len(out) == 0 {
		return 0
	}
	return out[len(out)-1].Sandboxes
}

// RunRestart fills pools to n Sandboxes, kills the controller and starts
// it again: time from the start to the first claim served, to every pool
// settled (no work queued, every pool full), and the apiserver writes in
// the first writeWindow (60 s in the issue) — a restart must not rewrite
// what is already right.
func RunRestart(ctx context.Context, cfg ScaleConfig, n int, writeWindow time.Duration) (*ScaleResult, error) {
	cfg.defaults()
	if cfg.StopController == nil || cfg.StartController == nil {
		return nil, errors.New("restart scenario needs a controller it can stop and start")
	}
	c, err := scaleClient(cfg.RestConfig)
	if err != nil {
		return nil, err
	}
	per := int32(n / cfg.Namespaces)
	cfg.logf("restart: filling %d pools of %d", cfg.Namespaces, per)
	if _, err := EnsurePools(ctx, c, cfg.Namespaces, per, cfg.Timeout); err != nil {
		return nil, err
	}
	if err := waitQuiet(ctx, c, cfg.Namespaces, int(per), cfg.Timeout); err != nil {
		return nil, err
	}
	cfg.StopController()
	w := cfg.begin(ctx) // no controller: its figures start from 0
	start := time.Now()
	if err := cfg.StartController(ctx); err != nil {
		return nil, err
	}
	w.peak.stop() // begin's sampler saw no controller
	w.peak = cfg.peakSampler(ctx)
	started := time.Since(start)
	// The first claim: created the moment the controller process is up.
	ns := ScaleNamespace(0)
	claim := &extv1beta1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "restart-",
			Labels: map[string]string{RunLabel: "restart", labels.CreatedBy: labels.CreatedByGoClient}},
		Spec: extv1beta1.SandboxClaimSpec{WarmPoolRef: extv1beta1.WarmPoolRef{Name: ScalePoolName}},
	}
	if err := c.Create(ctx, claim); err != nil {
		return nil, fmt.Errorf("creating the first claim: %w", err)
	}
	defer func() {
		_ = c.Delete(context.Background(), claim, client.PropagationPolicy(metav1.DeletePropagationBackground))
	}()
	var firstClaim, settled time.Duration
	deadline := start.Add(cfg.Timeout)
	for firstClaim == 0 || settled == 0 {
		if firstClaim == 0 {
			var got extv1beta1.SandboxClaim
			if err := c.Get(ctx, client.ObjectKeyFromObject(claim), &got); err == nil &&
				meta.IsStatusConditionTrue(got.Status.Conditions, "Ready") {
				firstClaim = time.Since(start)
			}
		}
		if settled == 0 && firstClaim > 0 {
			if ok, err := cfg.settled(ctx, c, per); err == nil && ok {
				settled = time.Since(start)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("restart: not settled after %s (first claim %s)", cfg.Timeout, firstClaim)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	cfg.logf("restart: first claim %s, settled %s; counting writes until %s", firstClaim, settled, writeWindow)
	if d := time.Until(start.Add(writeWindow)); d > 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(d):
		}
	}
	r := &ScaleResult{Scenario: ScaleRestart, Sandboxes: n, Claims: 1, Ready: 1}
	w.end(ctx, r)
	r.WritesPerClaim, r.CPUPerClaimMs = 0, 0 // one claim: per-claim figures mean nothing here
	r.Extra = map[string]float64{
		"process_up_seconds":  started.Seconds(),
		"first_claim_seconds": firstClaim.Seconds(),
		"settled_seconds":     settled.Seconds(),
		"window_seconds":      writeWindow.Seconds(),
		"writes_in_window":    r.Writes.Total(),
	}
	return r, nil
}

// settled reports whether the controller has no queued work and every
// pool is full and Ready.
func (cfg *ScaleConfig) settled(ctx context.Context, c client.Client, per int32) (bool, error) {
	s, err := scrapeURL(ctx, cfg.ControllerMetricsURL(), ctrlMetrics...)
	if err != nil {
		return false, err
	}
	if s.Values["workqueue_depth"] != 0 || s.Values["controller_runtime_reconcile_total"] == 0 {
		return false, nil
	}
	for i := range cfg.Namespaces {
		var p extv1beta1.SandboxWarmPool
		if err := c.Get(ctx, types.NamespacedName{Namespace: ScaleNamespace(i), Name: ScalePoolName}, &p); err != nil {
			return false, err
		}
		if p.Status.ReadyReplicas != per || p.Status.Replicas != per || p.Status.ObservedGeneration < p.Generation {
			return false, nil
		}
	}
	return true, nil
}

// RunMassDelete binds n claims (spread over the namespaces), waits for
// the pools to refill, deletes every claim at once and measures the time
// and writes until no claim is left and only the pools' Sandboxes and Pods
// remain. Extra["leftover_*"] count what remained beyond that (must be 0).
func RunMassDelete(ctx context.Context, cfg ScaleConfig, n int) (*ScaleResult, error) {
	cfg.defaults()
	c, err := scaleClient(cfg.RestConfig)
	if err != nil {
		return nil, err
	}
	per := n / cfg.Namespaces
	cfg.logf("delete: filling %d pools of %d", cfg.Namespaces, per)
	if _, err := EnsurePools(ctx, c, cfg.Namespaces, int32(per), cfg.Timeout); err != nil {
		return nil, err
	}
	if err := waitQuiet(ctx, c, cfg.Namespaces, per, cfg.Timeout); err != nil {
		return nil, err
	}
	cfg.logf("delete: binding %d claims", per*cfg.Namespaces)
	if err := bindClaims(ctx, c, cfg.Namespaces, per, cfg.Timeout); err != nil {
		return nil, err
	}
	// Wait for the refill the claims caused: it must not be counted as
	// the deletion's. Deleting a claim does not refill (its Sandbox left
	// the pool when it was adopted), so the pools stay full throughout.
	for i := range cfg.Namespaces {
		pool := &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: ScalePoolName, Namespace: ScaleNamespace(i)}}
		if err := waitPool(ctx, c, pool, int32(per), cfg.Timeout); err != nil {
			return nil, err
		}
	}
	cfg.logf("delete: deleting %d claims", per*cfg.Namespaces)
	w := cfg.begin(ctx)
	for i := range cfg.Namespaces {
		if err := c.DeleteAllOf(ctx, &extv1beta1.SandboxClaim{}, client.InNamespace(ScaleNamespace(i)),
			client.MatchingLabels{RunLabel: "mass"}, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			return nil, fmt.Errorf("deleting claims: %w", err)
		}
	}
	deadline := time.Now().Add(cfg.Timeout)
	// What must remain: the full pools, nothing of the claims.
	pools := leftovers{sandboxes: per * cfg.Namespaces, pods: per * cfg.Namespaces}
	var left leftovers
	for {
		got, err := countLeft(ctx, c, cfg.Namespaces)
		left = leftovers{claims: got.claims, sandboxes: got.sandboxes - pools.sandboxes, pods: got.pods - pools.pods}
		if err == nil && left == (leftovers{}) {
			break
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	r := &ScaleResult{Scenario: ScaleDelete, Sandboxes: per * cfg.Namespaces, Claims: per * cfg.Namespaces, Ready: per * cfg.Namespaces}
	w.end(ctx, r)
	r.Extra = map[string]float64{
		"delete_seconds":     r.Elapsed.Seconds(),
		"leftover_claims":    float64(left.claims),
		"leftover_sandboxes": float64(left.sandboxes),
		"leftover_pods":      float64(left.pods),
	}
	return r, nil
}

type leftovers struct{ claims, sandboxes, pods int }

func countLeft(ctx context.Context, c client.Client, namespaces int) (leftovers, error) {
	var l leftovers
	for i := range namespaces {
		ns := client.InNamespace(ScaleNamespace(i))
		var claims extv1beta1.SandboxClaimList
		var sbs sandboxv1beta1.SandboxList
		var pods corev1.PodList
		if err := c.List(ctx, &claims, ns); err != nil {
			return l, err
		}
		if err := c.List(ctx, &sbs, ns); err != nil {
			return l, err
		}
		if err := c.List(ctx, &pods, ns); err != nil {
			return l, err
		}
		l.claims += len(claims.Items)
		l.sandboxes += len(sbs.Items)
		l.pods += len(pods.Items)
	}
	return l, nil
}

// bindClaims creates per claims in each namespace (50 at a time) and
// waits until all are Ready.
func bindClaims(ctx context.Context, c client.Client, namespaces, per int, timeout time.Duration) error {
	sem := make(chan struct{}, 50)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for i := range namespaces {
		for j := range per {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				claim := &extv1beta1.SandboxClaim{
					ObjectMeta: metav1.ObjectMeta{Namespace: ScaleNamespace(i), Name: fmt.Sprintf("mass-%d", j),
						Labels: map[string]string{RunLabel: "mass", labels.CreatedBy: labels.CreatedByGoClient}},
					Spec: extv1beta1.SandboxClaimSpec{WarmPoolRef: extv1beta1.WarmPoolRef{Name: ScalePoolName}},
				}
				if err := c.Create(ctx, claim); err != nil && !apierrors.IsAlreadyExists(err) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("creating claims: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		ready := 0
		for i := range namespaces {
			var claims extv1beta1.SandboxClaimList
			if err := c.List(ctx, &claims, client.InNamespace(ScaleNamespace(i)), client.MatchingLabels{RunLabel: "mass"}); err != nil {
				return err
			}
			for k := range claims.Items {
				if meta.IsStatusConditionTrue(claims.Items[k].Status.Conditions, "Ready") {
					ready++
				}
			}
		}
		if ready == namespaces*per {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d claims Ready after %s", ready, namespaces*per, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func scaleClient(rc *rest.Config) (client.Client, error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = -1, 1000
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return c, nil
}
