package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// settleResources are the kinds whose changes mean a fill (or the garbage
// collector's cascade after it) is still running: the pool's Sandboxes and
// their Pods. Claims are not among them: a growth step waits for the
// previous step's claims to be gone before it fills.
var settleResources = []schema.GroupVersionResource{
	{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"},
	{Group: "", Version: "v1", Resource: "pods"},
}

// Settled is what WaitSettled saw.
type Settled struct {
	// Took is the time from the call until the quiet period had passed.
	Took time.Duration
	// Events is how many Sandbox and Pod changes arrived meanwhile.
	Events int
}

// WaitSettled waits until no Sandbox or Pod in any namespace has changed
// for quiet, as the apiserver's watch reports it (metadata only: the
// watch must not cost the apiserver much itself). It is the condition a
// background measurement needs: a fill that reports its pools Ready can
// still be writing statuses, and the garbage collector can still be
// deleting members the pool replaced.
func WaitSettled(ctx context.Context, rc *rest.Config, quiet, timeout time.Duration) (Settled, error) {
	start := time.Now()
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = -1, 1000
	mc, err := metadata.NewForConfig(rc)
	if err != nil {
		return Settled{}, fmt.Errorf("settle: metadata client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var mu sync.Mutex
	last, events := time.Now(), 0
	saw := func() {
		mu.Lock()
		last, events = time.Now(), events+1
		mu.Unlock()
	}
	errc := make(chan error, len(settleResources))
	for _, gvr := range settleResources {
		// Watch from the current version: the list with a limit of 1 only
		// fetches that version, not the objects.
		l, err := mc.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return Settled{}, fmt.Errorf("settle: listing %s: %w", gvr.Resource, err)
		}
		go func() { errc <- watchChanges(ctx, mc, gvr, l.ResourceVersion, saw) }()
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			return Settled{}, err
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			return Settled{Took: time.Since(start), Events: events},
				fmt.Errorf("settle: Sandboxes and Pods still changing after %s (%d changes, last %s ago): %w",
					timeout, events, time.Since(last).Round(time.Millisecond), ctx.Err())
		case <-tick.C:
			mu.Lock()
			done, n := time.Since(last) >= quiet, events
			mu.Unlock()
			if done {
				return Settled{Took: time.Since(start), Events: n}, nil
			}
		}
	}
}

// watchChanges calls saw for every change of gvr from rv on, resuming the
// watch when the apiserver closes it, until ctx ends (then it returns nil).
func watchChanges(ctx context.Context, mc metadata.Interface, gvr schema.GroupVersionResource, rv string, saw func()) error {
	for ctx.Err() == nil {
		w, err := mc.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() != nil {
				return nil //nolint:nilerr // the wait ended (ctx), not the watch: the caller's result stands
			}
			return fmt.Errorf("settle: watching %s: %w", gvr.Resource, err)
		}
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Error:
				w.Stop()
				if ctx.Err() != nil {
					return nil //nolint:nilerr // the wait ended (ctx), not the watch: the caller's result stands
				}
				return fmt.Errorf("settle: watching %s: %v", gvr.Resource, ev.Object)
			case watch.Bookmark:
				// Not a change; only where to resume.
			default:
				saw()
			}
			if m, ok := ev.Object.(metav1.Object); ok {
				rv = m.GetResourceVersion()
			}
		}
		w.Stop()
	}
	return nil
}

// background measures the controller's and the apiserver's CPU over d
// with no claims: the rate the claim window's gross figures carry whether
// or not anyone claims (informer resyncs, kwok's node updates, a fill's
// tail).
func (cfg *ScaleConfig) background(ctx context.Context, d time.Duration) (*ScaleResult, error) {
	if cfg.BeforeBackground != nil {
		cfg.BeforeBackground(ctx, d)
	}
	w := cfg.begin(ctx)
	// A fixed measurement window, not a wait for a condition: its length
	// is the point.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(d):
	}
	r := &ScaleResult{}
	w.end(ctx, r)
	return r, nil
}

// netPerClaimMs is a window's CPU per claim with the background charged
// out: gross CPU seconds over the window, minus the background rate
// (bgCPU over bgWindow) times the window's length, per claim, in
// milliseconds. It can come out negative when the background was busier
// than the claim window's share of it; that is noise, reported as it is.
func netPerClaimMs(gross float64, window time.Duration, bgCPU float64, bgWindow time.Duration, claims int) float64 {
	if claims <= 0 || bgWindow <= 0 {
		return 0
	}
	rate := bgCPU / bgWindow.Seconds()
	return (gross - rate*window.Seconds()) * 1000 / float64(claims)
}

// chargeBackground fills r's background and net figures from bg, the
// background window measured just before r's claim window.
func (r *ScaleResult) chargeBackground(bg *ScaleResult) {
	r.BackgroundSeconds = bg.Elapsed.Seconds()
	r.BackgroundControllerCPU = bg.ControllerCPU
	r.BackgroundAPIServerCPU = bg.APIServerCPU
	r.BackgroundWrites = bg.Writes.Total()
	r.NetCPUPerClaimMs = netPerClaimMs(r.ControllerCPU, r.Elapsed, bg.ControllerCPU, bg.Elapsed, r.Claims)
	r.NetAPIServerCPUPerClaimMs = netPerClaimMs(r.APIServerCPU, r.Elapsed, bg.APIServerCPU, bg.Elapsed, r.Claims)
}
