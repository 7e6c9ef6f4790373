package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
)

// SDK is the scenario of RunSDK.
const SDK = "sdk"

// SDKConfig describes a time-to-interactive run through the Go SDK: claims
// one after another, each opened, used and closed the way an agent does.
type SDKConfig struct {
	RestConfig *rest.Config
	Namespace  string
	WarmPool   string
	// Count is the number of claims.
	Count int
	// PoolSize is the warm pool size set and awaited before the first
	// claim; 0 keeps the pool's size. The original size is restored.
	PoolSize int32
	// Pace waits, before each claim, until the pool is full and Ready
	// again and no Pod of the namespace is terminating, so every claim
	// meets a quiet, full pool (and is warm). Without it claims follow each
	// other at once and a pool smaller than Count runs dry.
	Pace bool
	// Options are the SDK options (for example APIURL, the router's
	// address). RestConfig, Namespace and TracerProvider are set by the
	// runner; Quiet is forced.
	Options sandbox.Options
	// Command is run once per sandbox (default "echo ready").
	Command string
	// WantOutput, when set, is the stdout the command must print.
	WantOutput string
	// Timeout bounds each claim's Open and the pool waits.
	Timeout time.Duration
}

// RunSDK claims Count sandboxes through the Go SDK, one after another, and
// measures for each, from the moment CreateSandbox is called: the claim
// created (create call returned), bound and Ready as the SDK saw them,
// the connection established and the first command output. Milestones
// come from the SDK's own spans. Every claim is closed (deleted) before
// the next one starts.
func RunSDK(ctx context.Context, cfg SDKConfig) (*Result, error) {
	if cfg.RestConfig == nil || cfg.Namespace == "" || cfg.WarmPool == "" || cfg.Count <= 0 {
		return nil, errors.New("sdk scenario needs a cluster configuration, a namespace, a warm pool and a count > 0")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 3 * time.Minute
	}
	if cfg.Command == "" {
		cfg.Command, cfg.WantOutput = "echo ready", "ready\n"
	}
	c, pool, err := harnessClient(ctx, cfg.RestConfig, cfg.Namespace, cfg.WarmPool)
	if err != nil {
		return nil, err
	}
	size := pool.DesiredReplicas()
	if cfg.PoolSize > 0 && cfg.PoolSize != size {
		orig := size
		if err := scalePool(ctx, c, pool, cfg.PoolSize); err != nil {
			return nil, err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = scalePool(cctx, c, pool, orig)
		}()
		size = cfg.PoolSize
	}
	if size <= 0 {
		return nil, fmt.Errorf("warm pool %s/%s has no replicas (fix: pass a pool size)", cfg.Namespace, cfg.WarmPool)
	}
	if err := waitPool(ctx, c, pool, size, cfg.Timeout); err != nil {
		return nil, err
	}

	rec := newSpanMilestones()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	opts := cfg.Options
	opts.RestConfig, opts.Namespace, opts.TracerProvider, opts.Quiet = cfg.RestConfig, cfg.Namespace, tp, true
	opts.K8sHelper = nil
	sdk, err := sandbox.NewClient(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sdk.DeleteAll(cctx)
	}()

	apiBefore, apiErr := ScrapeAPIServerWrites(ctx, cfg.RestConfig)
	res := &Result{Scenario: SDK}
	start := time.Now()
	for i := range cfg.Count {
		if cfg.Pace && i > 0 {
			if err := waitQuietPool(ctx, c, pool, size, cfg.Timeout); err != nil {
				return nil, err
			}
		}
		t, err := sdkClaim(ctx, cfg, sdk, rec, c, i)
		if t != nil {
			res.Traces = append(res.Traces, t)
		}
		if err != nil {
			return nil, err
		}
	}
	res.Elapsed = time.Since(start)
	if err := res.countTraces(); err != nil {
		return nil, err
	}
	for _, t := range res.Traces {
		switch t.Launch {
		case "":
		case "warm":
			res.Warm++
		default:
			res.ColdLaunches++
		}
	}
	res.Milestones = MilestoneSummaries(res.Traces)
	res.Steps = StepSummaries(res.Traces)
	if res.Elapsed > 0 {
		res.Throughput = float64(res.Ready) / res.Elapsed.Seconds()
	}
	if apiErr == nil {
		// Let the last teardown and refill be counted.
		time.Sleep(2 * time.Second)
		var after RequestCounts
		if after, apiErr = ScrapeAPIServerWrites(ctx, cfg.RestConfig); apiErr == nil {
			res.Writes = after.Sub(apiBefore)
			res.splitWrites()
		}
	}
	if apiErr != nil {
		res.WritesError = apiErr.Error()
	}
	return res, nil
}

// sdkClaim is one timed claim: CreateSandbox, Run, then (untimed) the
// launch type and Close. A failure of the claim itself is recorded in the
// trace; only a broken harness returns an error.
func sdkClaim(ctx context.Context, cfg SDKConfig, sdk *sandbox.Client, rec *spanMilestones, c client.Client, i int) (*ClaimTrace, error) {
	octx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	rec.take() // nothing left over from the previous claim
	t := NewTrace(fmt.Sprintf("sdk-%d", i), time.Now())
	sb, err := sdk.CreateSandbox(octx, cfg.WarmPool, cfg.Namespace)
	if err != nil {
		t.Err = err.Error()
		return t, nil
	}
	res, err := sb.Run(octx, cfg.Command)
	end := time.Now()
	t.Name, t.Sandbox = sb.ClaimName(), sb.SandboxName()
	switch {
	case err != nil:
		t.Err = err.Error()
	case res.ExitCode != 0 || (cfg.WantOutput != "" && res.Stdout != cfg.WantOutput):
		t.Err = fmt.Sprintf("unexpected command result: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	default:
		t.Mark(FirstOutput, end)
	}
	got := rec.take()
	// The SDK sets up the transport of router modes while the claim is
	// bound, so its span may end before Ready: the sandbox is reachable
	// once both are done.
	if c, ok := got[Connected]; ok {
		if r, ok := got[Ready]; ok && c.Before(r) {
			got[Connected] = r
		}
	}
	for m, at := range got {
		t.Mark(m, at)
	}
	t.setSandboxLaunch(ctx, c, cfg.Namespace, t.Sandbox)
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer ccancel()
	if err := sb.Close(cctx); err != nil {
		return t, fmt.Errorf("closing %s: %w", t.Name, err)
	}
	return t, nil
}

// spanMilestones turns the SDK's spans into milestones: the end of each
// Open step is when the SDK had passed it. Claims run one at a time, so
// everything recorded since the last take belongs to the current claim.
type spanMilestones struct {
	mu  sync.Mutex
	got map[string]time.Time
}

func newSpanMilestones() *spanMilestones {
	return &spanMilestones{got: map[string]time.Time{}}
}

// milestoneOfSpan maps an SDK span name (after the service prefix) to a
// milestone.
func milestoneOfSpan(name string) (string, bool) {
	_, op, ok := strings.Cut(name, ".")
	if !ok {
		return "", false
	}
	switch op {
	case "create_claim":
		return Created, true
	case "resolve_sandbox_name":
		return Bound, true
	case "wait_for_sandbox_ready":
		return Ready, true
	case "connect", "dev_mode_tunnel", "sandboxd_pod_tunnel", "wait_for_gateway":
		return Connected, true
	}
	return "", false
}

func (r *spanMilestones) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *spanMilestones) OnEnd(s sdktrace.ReadOnlySpan) {
	m, ok := milestoneOfSpan(s.Name())
	if !ok || s.Status().Code == codes.Error {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.got[m]; !seen {
		r.got[m] = s.EndTime()
	}
}
func (r *spanMilestones) Shutdown(context.Context) error   { return nil }
func (r *spanMilestones) ForceFlush(context.Context) error { return nil }

// take returns and forgets what was recorded.
func (r *spanMilestones) take() map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.got
	r.got = map[string]time.Time{}
	return m
}

// waitQuietPool waits until the pool controls want Ready Sandboxes and no
// Pod of the namespace is still terminating: the next claim then meets a
// full pool and no teardown competing for the CPU. It counts the members
// itself, since the pool's status lags a claim by a few milliseconds.
func waitQuietPool(ctx context.Context, c client.Client, pool *extv1beta1.SandboxWarmPool, want int32, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ready, terminating, err := poolState(ctx, c, pool)
		if err != nil {
			return err
		}
		if ready >= want && terminating == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pool %s did not get back to %d Ready sandboxes in %s (ready %d, terminating pods %d)",
				pool.Name, want, timeout, ready, terminating)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// poolState counts the Ready Sandboxes the pool controls and the Pods of
// its namespace that are being deleted.
func poolState(ctx context.Context, c client.Client, pool *extv1beta1.SandboxWarmPool) (ready, terminating int32, err error) {
	var sbs sandboxv1beta1.SandboxList
	if err := c.List(ctx, &sbs, client.InNamespace(pool.Namespace)); err != nil {
		return 0, 0, fmt.Errorf("listing sandboxes: %w", err)
	}
	for i := range sbs.Items {
		sb := &sbs.Items[i]
		ref := metav1.GetControllerOf(sb)
		if sb.DeletionTimestamp == nil && ref != nil && ref.Kind == "SandboxWarmPool" && ref.Name == pool.Name &&
			meta.IsStatusConditionTrue(sb.Status.Conditions, "Ready") {
			ready++
		}
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(pool.Namespace)); err != nil {
		return 0, 0, fmt.Errorf("listing pods: %w", err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			terminating++
		}
	}
	return ready, terminating, nil
}
