package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// Scenario kinds.
const (
	Sustained = "sustained" // Poisson arrivals at Rate for Duration
	Burst     = "burst"     // Count claims at once
	Cold      = "cold"      // Count claims against an empty pool
)

// RunLabel marks the claims of one benchmark run so they can be watched
// and cleaned up together.
const RunLabel = "bench.agents.x-k8s.io/run"

// Config describes one benchmark run.
type Config struct {
	RestConfig *rest.Config
	Namespace  string
	WarmPool   string
	Scenario   string
	// Rate (claims/s) and Duration drive Sustained.
	Rate     float64
	Duration time.Duration
	// Count drives Burst and Cold.
	Count int
	// PoolSize is the warm pool size set and awaited before the timed
	// window (ignored by Cold, which empties the pool).
	PoolSize int32
	// Timeout bounds the wait for every claim to be Ready.
	Timeout time.Duration
	// Interact, when set, is called once per Ready claim to reach the
	// runtime-answering and first-output milestones (for example through
	// the SDK and the router).
	Interact func(ctx context.Context, namespace, sandbox string, trace *ClaimTrace) error
	// Dwell, when > 0, deletes each claim this long after it is Ready (and
	// its interaction is done), as an agent finishing its task would; this
	// bounds the live sandboxes of a long sustained run. 0 keeps every
	// claim until the end of the run.
	Dwell time.Duration
	// ControllerMetricsURL, when set, is scraped for CPU and peak RSS.
	ControllerMetricsURL string
	// Seed makes Poisson arrivals reproducible.
	Seed int64
}

// Result is what a run measured.
type Result struct {
	Scenario        string             `json:"scenario"`
	Claims          int                `json:"claims"`
	Ready           int                `json:"ready"`
	Errors          int                `json:"errors"`
	Warm            int                `json:"warm"`
	ColdLaunches    int                `json:"cold"`
	Elapsed         time.Duration      `json:"elapsed_ns"`
	Throughput      float64            `json:"throughput_claims_per_s"`
	Milestones      map[string]Summary `json:"milestones"`
	Steps           map[string]Summary `json:"steps,omitempty"`
	Writes          RequestCounts      `json:"apiserver_writes"`
	WritesPerClaim  float64            `json:"apiserver_writes_per_claim"`
	ClientWrites    float64            `json:"client_writes_per_claim"`
	ClaimPathWrites float64            `json:"claim_path_writes_per_claim"`
	RefillWrites    float64            `json:"refill_writes_per_claim"`
	TeardownWrites  float64            `json:"teardown_writes_per_claim"`
	EventWrites     float64            `json:"event_writes_per_claim"`
	WritesError     string             `json:"apiserver_writes_error,omitempty"`
	// ServerTimes are the apiserver's and etcd's mean times of the claim
	// path's write requests during the run (all clients' requests to those
	// resources, the refill's included); ServerTimesError says why they
	// are missing.
	ServerTimes      ServerTimes `json:"server_times,omitempty"`
	ServerTimesError string      `json:"server_times_error,omitempty"`
	// Conversions are the apiserver's calls to the CRDs' conversion
	// webhook during the run ("convert RESOURCE FROM->TO"), with their mean
	// times, and ConversionsPerClaim their number per claim: one per
	// custom-resource write for each served non-storage version (v1alpha1),
	// whether or not any client reads it.
	Conversions         ServerTimes `json:"conversions,omitempty"`
	ConversionsPerClaim float64     `json:"conversion_calls_per_claim"`
	ControllerCPU       float64     `json:"controller_cpu_seconds,omitempty"`
	ControllerRSS       float64     `json:"controller_peak_rss_bytes,omitempty"`
	// Calibration is the apiserver's floor and the machine's CPU steal at
	// the time of the run; CalibrationError says why it is missing.
	Calibration      *Calibration  `json:"calibration,omitempty"`
	CalibrationError string        `json:"calibration_error,omitempty"`
	Traces           []*ClaimTrace `json:"traces,omitempty"`
}

// splitWrites divides the run's apiserver writes per claim into:
//   - client: the harness creating (and, with --dwell, deleting) claims;
//   - claim path: binding a claim (adoption patch of the Sandbox, claim
//     status, the Pod relabel, any claim metadata writes);
//   - refill: the pool making a replacement Sandbox and Pod, the scheduler
//     binding it and the kubelet starting it (for a cold claim, its own
//     Sandbox and Pod);
//   - teardown: deletions of Sandboxes and Pods after claims go away;
//   - events: Events from every component (kubelet and scheduler included).
//
// Lease renewals of leader election are background noise and not counted.
func (r *Result) splitWrites() {
	if r.Claims == 0 {
		return
	}
	n := float64(r.Claims)
	var client, claim, refill, teardown, events float64
	for k, v := range r.Writes {
		verb, res, _ := strings.Cut(k, " ")
		switch {
		case res == "leases":
		case res == "events":
			events += v
		case res == "sandboxclaims" && (verb == "POST" || verb == "DELETE"):
			client += v
		case res == "sandboxclaims" || res == "sandboxclaims/status" ||
			(verb == "PATCH" && (res == "sandboxes" || res == "pods")):
			claim += v
		case verb == "DELETE":
			teardown += v
		default:
			refill += v
		}
	}
	r.ClientWrites, r.ClaimPathWrites, r.RefillWrites = client/n, claim/n, refill/n
	r.TeardownWrites, r.EventWrites = teardown/n, events/n
	r.WritesPerClaim = (client + claim + refill + teardown + events) / n
}

// countTraces validates the traces and counts claims, errors and Ready.
func (r *Result) countTraces() error {
	r.Claims = len(r.Traces)
	for _, t := range r.Traces {
		if err := t.Validate(); err != nil {
			return err
		}
		if t.Err != "" {
			r.Errors++
		}
		if _, ok := t.Since(Ready); ok {
			r.Ready++
		}
	}
	return nil
}

// harnessClient returns the harness's own client, unthrottled (it is not
// the one being measured), and the warm pool the scenario uses.
func harnessClient(ctx context.Context, cfg *rest.Config, namespace, warmPool string) (client.WithWatch, *extv1beta1.SandboxWarmPool, error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, nil, err
	}
	rc := rest.CopyConfig(cfg)
	rc.QPS, rc.Burst = -1, 1000
	c, err := client.NewWithWatch(rc, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("creating client: %w", err)
	}
	pool := &extv1beta1.SandboxWarmPool{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: warmPool}, pool); err != nil {
		return nil, nil, fmt.Errorf("warm pool %s/%s: %w", namespace, warmPool, err)
	}
	return c, pool, nil
}

// Run executes one scenario. It sizes and pre-warms the pool outside the
// timed window and deletes every claim it created before returning.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, pool, err := harnessClient(ctx, cfg.RestConfig, cfg.Namespace, cfg.WarmPool)
	if err != nil {
		return nil, err
	}
	origReplicas := pool.DesiredReplicas()
	want := cfg.PoolSize
	if cfg.Scenario == Cold {
		want = 0
	}
	if err := scalePool(ctx, c, pool, want); err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = scalePool(cctx, c, pool, origReplicas)
	}()
	if err := waitPool(ctx, c, pool, want, cfg.Timeout); err != nil {
		return nil, err
	}

	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	defer cleanup(c, cfg.Namespace, runID)

	// Watch before the first create so no transition is missed.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	list := &extv1beta1.SandboxClaimList{}
	if err := c.List(ctx, list, client.InNamespace(cfg.Namespace), client.MatchingLabels{RunLabel: runID}); err != nil {
		return nil, fmt.Errorf("listing claims: %w", err)
	}

	// Before the write counters are read: its writes are not the run's.
	calib, calibErr := calibrateWrites(ctx, c, cfg.Namespace, runID)

	var apiBefore RequestCounts
	apiBefore, apiErr := ScrapeAPIServerWrites(ctx, cfg.RestConfig)
	timesBefore, timesErr := scrapeServerTimes(ctx, cfg.RestConfig)
	var cpuBefore float64
	if cfg.ControllerMetricsURL != "" {
		cpuBefore, _, _ = ScrapeProcess(ctx, cfg.ControllerMetricsURL)
	}
	peakRSS := newPeakSampler(ctx, cfg.ControllerMetricsURL)

	tr := newTracker()
	// Time to interactive starts the moment each claim is Ready, not when
	// the whole batch is.
	var interactions sync.WaitGroup
	if cfg.Interact != nil || cfg.Dwell > 0 {
		tr.onReady = func(t *ClaimTrace, sandbox string) {
			interactions.Add(1)
			go func() {
				defer interactions.Done()
				if cfg.Interact != nil {
					if err := cfg.Interact(ctx, cfg.Namespace, sandbox, t); err != nil {
						tr.setErr(t, err)
					}
				}
				if cfg.Dwell > 0 {
					select {
					case <-time.After(cfg.Dwell):
					case <-ctx.Done():
						return
					}
					t.setSandboxLaunch(ctx, c, cfg.Namespace, sandbox)
					claim := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: t.Name}}
					_ = c.Delete(ctx, claim, client.PropagationPolicy(metav1.DeletePropagationBackground))
				}
			}()
		}
	}
	readyAll := make(chan struct{})
	go tr.watchLoop(watchCtx, c, cfg.Namespace, runID, list.ResourceVersion, readyAll)

	cpuAtStart, haveCPU := readCPUTimes()
	start := time.Now()
	var wg sync.WaitGroup
	for i, at := range arrivals(cfg) {
		if d := time.Until(start.Add(at)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		name := fmt.Sprintf("bench-%s-%d", runID, i)
		tr.add(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			claim := &extv1beta1.SandboxClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: name,
					Labels:      map[string]string{RunLabel: runID, labels.CreatedBy: labels.CreatedByGoClient},
					Annotations: map[string]string{labels.ClientFirstRequestedAt: time.Now().UTC().Format(time.RFC3339Nano)}},
				Spec: extv1beta1.SandboxClaimSpec{WarmPoolRef: extv1beta1.WarmPoolRef{Name: cfg.WarmPool}},
			}
			if err := c.Create(ctx, claim); err != nil {
				tr.fail(name, err)
				return
			}
			tr.markCreated(name, time.Now())
		}()
	}
	wg.Wait()
	tr.sealed(len(arrivals(cfg)))
	select {
	case <-readyAll:
	case <-time.After(cfg.Timeout):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	elapsed := time.Since(start)
	if cpuAtEnd, ok := readCPUTimes(); ok && haveCPU {
		calib.StealPercent = stealPercent(cpuAtStart, cpuAtEnd)
	}

	interactions.Wait()
	// Let the controllers finish side effects (refill, relabels) so their
	// writes are counted.
	time.Sleep(2 * time.Second)

	res := &Result{Scenario: cfg.Scenario, Elapsed: elapsed, Traces: tr.traces()}
	if calibErr != nil {
		res.CalibrationError = calibErr.Error()
	} else {
		res.Calibration = &calib
	}
	if err := res.countTraces(); err != nil {
		return nil, err
	}
	res.Milestones = MilestoneSummaries(res.Traces)
	res.Steps = StepSummaries(res.Traces)
	if elapsed > 0 {
		res.Throughput = float64(res.Ready) / elapsed.Seconds()
	}
	res.Warm, res.ColdLaunches = countLaunches(ctx, c, cfg.Namespace, res.Traces)
	if apiErr == nil {
		var after RequestCounts
		if after, apiErr = ScrapeAPIServerWrites(ctx, cfg.RestConfig); apiErr == nil {
			res.Writes = after.Sub(apiBefore)
			res.splitWrites()
		}
	}
	if apiErr != nil {
		res.WritesError = apiErr.Error()
	}
	if timesErr == nil {
		var after durationTotals
		if after, timesErr = scrapeServerTimes(ctx, cfg.RestConfig); timesErr == nil {
			res.ServerTimes, res.Conversions = after.Sub(timesBefore).splitConversions()
			if res.Claims > 0 {
				res.ConversionsPerClaim = res.Conversions.calls() / float64(res.Claims)
			}
		}
	}
	if timesErr != nil {
		res.ServerTimesError = timesErr.Error()
	}
	if cfg.ControllerMetricsURL != "" {
		if cpu, _, err := ScrapeProcess(ctx, cfg.ControllerMetricsURL); err == nil {
			res.ControllerCPU = cpu - cpuBefore
		}
		res.ControllerRSS = peakRSS.stop()
	}
	return res, nil
}

func (cfg *Config) validate() error {
	var errs []error
	if cfg.RestConfig == nil {
		errs = append(errs, errors.New("no cluster configuration"))
	}
	if cfg.Namespace == "" || cfg.WarmPool == "" {
		errs = append(errs, errors.New("namespace and warm pool are required"))
	}
	switch cfg.Scenario {
	case Sustained:
		if cfg.Rate <= 0 || cfg.Duration <= 0 {
			errs = append(errs, errors.New("sustained needs a rate > 0 and a duration > 0"))
		}
	case Burst, Cold:
		if cfg.Count <= 0 {
			errs = append(errs, fmt.Errorf("%s needs a count > 0", cfg.Scenario))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown scenario %q (want sustained, burst or cold)", cfg.Scenario))
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	return errors.Join(errs...)
}

// arrivals returns when each claim is created, relative to the start.
func arrivals(cfg Config) []time.Duration {
	switch cfg.Scenario {
	case Sustained:
		rng := rand.New(rand.NewSource(cfg.Seed))
		var out []time.Duration
		var t time.Duration
		for {
			// Exponential inter-arrival times make a Poisson process.
			t += time.Duration(rng.ExpFloat64() / cfg.Rate * float64(time.Second))
			if t >= cfg.Duration {
				return out
			}
			out = append(out, t)
		}
	default:
		return make([]time.Duration, cfg.Count)
	}
}

func scalePool(ctx context.Context, c client.Client, pool *extv1beta1.SandboxWarmPool, replicas int32) error {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	p := pool.DeepCopy()
	if err := c.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("scaling pool %s to %d: %w", pool.Name, replicas, err)
	}
	return nil
}

// waitPool waits until the pool holds exactly want Ready Sandboxes.
func waitPool(ctx context.Context, c client.Client, pool *extv1beta1.SandboxWarmPool, want int32, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		p := &extv1beta1.SandboxWarmPool{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pool), p); err != nil {
			return fmt.Errorf("reading pool: %w", err)
		}
		if p.Status.ReadyReplicas == want && p.Status.Replicas == want && p.Status.ObservedGeneration >= p.Generation {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pool %s did not reach %d ready sandboxes in %s (ready %d, replicas %d)",
				pool.Name, want, timeout, p.Status.ReadyReplicas, p.Status.Replicas)
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func cleanup(c client.Client, ns, runID string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = c.DeleteAllOf(ctx, &extv1beta1.SandboxClaim{}, client.InNamespace(ns), client.MatchingLabels{RunLabel: runID},
		client.PropagationPolicy(metav1.DeletePropagationBackground))
}

// countLaunches reads each bound Sandbox's launch-type label.
func countLaunches(ctx context.Context, c client.Client, ns string, traces []*ClaimTrace) (warm, cold int) {
	for _, t := range traces {
		if t.Sandbox == "" {
			continue
		}
		if t.Launch == "" {
			t.setSandboxLaunch(ctx, c, ns, t.Sandbox)
		}
		if t.Launch == labels.LaunchTypeWarm {
			warm++
		} else {
			cold++
		}
	}
	return warm, cold
}

// setSandboxLaunch records the launch type of the claim's Sandbox.
func (t *ClaimTrace) setSandboxLaunch(ctx context.Context, c client.Client, ns, sandbox string) {
	sb := &sandboxv1beta1.Sandbox{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: sandbox}, sb); err != nil {
		return
	}
	t.mu.Lock()
	t.Launch = sb.Labels[labels.LaunchType]
	t.mu.Unlock()
}

// tracker collects traces from the client side and the claim watch.
type tracker struct {
	mu       sync.Mutex
	byName   map[string]*ClaimTrace
	order    []*ClaimTrace
	expected int
	readyN   int
	notify   func()
	// onReady runs (with the lock held; it must not block) when a claim is
	// first seen Ready.
	onReady func(t *ClaimTrace, sandbox string)
}

// setErr records an error found after a claim was Ready.
func (t *tracker) setErr(tr *ClaimTrace, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr.Err == "" {
		tr.Err = err.Error()
	}
}

func newTracker() *tracker { return &tracker{byName: map[string]*ClaimTrace{}, expected: -1} }

func (t *tracker) add(name string) *ClaimTrace {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := NewTrace(name, time.Now())
	t.byName[name] = tr
	t.order = append(t.order, tr)
	return tr
}

func (t *tracker) markCreated(name string, response time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr, ok := t.byName[name]; ok {
		tr.MarkCreated(response)
	}
}

func (t *tracker) fail(name string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr, ok := t.byName[name]; ok && tr.Err == "" {
		tr.Err = err.Error()
		t.readyN++ // a failed claim will never be Ready; do not wait for it
		t.check()
	}
}

func (t *tracker) sealed(n int) {
	t.mu.Lock()
	t.expected = n
	t.check()
	t.mu.Unlock()
}

func (t *tracker) check() {
	if t.expected >= 0 && t.readyN >= t.expected && t.notify != nil {
		t.notify()
		t.notify = nil
	}
}

func (t *tracker) traces() []*ClaimTrace {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*ClaimTrace(nil), t.order...)
}

// watchLoop marks Bound and Ready from claim watch events, as seen by the
// client: the times a user of the API would see. A watch that ends is
// resumed from the last resourceVersion; one that expired is replaced by a
// fresh list, so a long run never silently stops observing.
func (t *tracker) watchLoop(ctx context.Context, c client.WithWatch, ns, runID, rv string, done chan struct{}) {
	var once sync.Once
	t.mu.Lock()
	t.notify = func() { once.Do(func() { close(done) }) }
	t.mu.Unlock()
	sel := k8slabels.SelectorFromSet(k8slabels.Set{RunLabel: runID})
	for ctx.Err() == nil {
		if rv == "" {
			list := &extv1beta1.SandboxClaimList{}
			if err := c.List(ctx, list, &client.ListOptions{Namespace: ns, LabelSelector: sel}); err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for i := range list.Items {
				t.observe(&list.Items[i], time.Now())
			}
			rv = list.ResourceVersion
		}
		w, err := c.Watch(ctx, &extv1beta1.SandboxClaimList{}, &client.ListOptions{
			Namespace: ns, LabelSelector: sel, Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true},
		})
		if err != nil {
			rv = ""
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				rv = "" // expired or broken: relist
				break
			}
			if claim, ok := ev.Object.(*extv1beta1.SandboxClaim); ok {
				if ev.Type != watch.Bookmark {
					t.observe(claim, time.Now())
				}
				rv = claim.ResourceVersion
			}
		}
		w.Stop()
	}
}

// observe records what one claim object shows.
func (t *tracker) observe(claim *extv1beta1.SandboxClaim, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr, ok := t.byName[claim.Name]
	if !ok {
		return
	}
	if _, seen := tr.Since(Ready); !seen && claim.Status.SandboxStatus.Name != "" {
		tr.Sandbox = claim.Status.SandboxStatus.Name
		tr.Mark(Bound, now)
	}
	if meta.IsStatusConditionTrue(claim.Status.Conditions, "Ready") {
		if _, seen := tr.Since(Ready); !seen {
			tr.Mark(Ready, now)
			t.readyN++
			t.check()
			if t.onReady != nil {
				t.onReady(tr, claim.Status.SandboxStatus.Name)
			}
		}
	}
}

// peakSampler keeps the highest RSS seen while it runs.
type peakSampler struct {
	stopCh chan struct{}
	done   chan float64
}

// newPeakSampler polls a metrics endpoint (none when url is empty).
func newPeakSampler(ctx context.Context, url string) *peakSampler {
	if url == "" {
		return samplePeak(nil)
	}
	return samplePeak(func() (float64, bool) {
		_, rss, err := ScrapeProcess(ctx, url)
		return rss, err == nil
	})
}

// samplePeak calls read every 200 ms until stop and keeps the highest value
// it reports; with a nil read it only waits for stop (peak 0).
func samplePeak(read func() (float64, bool)) *peakSampler {
	s := &peakSampler{stopCh: make(chan struct{}), done: make(chan float64, 1)}
	go func() {
		peak := 0.0
		for read != nil {
			if v, ok := read(); ok && v > peak {
				peak = v
			}
			select {
			case <-s.stopCh:
				s.done <- peak
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		<-s.stopCh
		s.done <- peak
	}()
	return s
}

func (s *peakSampler) stop() float64 {
	close(s.stopCh)
	return <-s.done
}
