package router

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Operating modes of a Sandbox (spec.operatingMode).
const (
	ModeRunning   = "Running"
	ModeSuspended = "Suspended"
)

// SandboxControl is the write side the router needs: flipping a Sandbox's
// operating mode and publishing activity for other router replicas. The
// Kubernetes implementation is in control.go; tests may substitute a fake.
type SandboxControl interface {
	// SetOperatingMode patches spec.operatingMode of the sandbox with the
	// given UID. A non-empty resourceVersion makes the patch conditional. A
	// non-zero activity is written as the last-activity annotation in the
	// same patch.
	SetOperatingMode(ctx context.Context, key SandboxKey, uid, mode, resourceVersion string, activity time.Time) error
	// MarkActivity writes the last-activity annotation.
	MarkActivity(ctx context.Context, key SandboxKey, uid string, at time.Time) error
}

// Resumer wakes suspended sandboxes on demand. Concurrent requests for the
// same sandbox share one patch (singleflight), and requests that arrive
// after the patch but before the cache has seen it do not patch again.
type Resumer struct {
	control SandboxControl
	metrics *Metrics
	// timeout bounds one patch call; it is detached from the first caller's
	// context so that its disconnect does not fail everybody else's resume.
	timeout time.Duration
	// stampActivity writes the last-activity annotation with the resume, so
	// that another replica's idle loop does not suspend the sandbox again
	// before the held request reaches it.
	stampActivity bool
	base          context.Context

	group singleflight.Group
	mu    sync.Mutex
	// done records, per sandbox, the resourceVersion that was current when
	// our resume patch succeeded. While the cache still shows that version
	// the patch is known to be in flight through the watch.
	done map[SandboxKey]string
}

// NewResumer returns a Resumer. base is cancelled at shutdown.
func NewResumer(base context.Context, control SandboxControl, m *Metrics, timeout time.Duration, stampActivity bool) *Resumer {
	return &Resumer{control: control, metrics: m, timeout: timeout, stampActivity: stampActivity, base: base, done: map[SandboxKey]string{}}
}

// Resume asks for the sandbox to run. It returns once the patch has been
// accepted (not once the sandbox is ready; callers wait on the cache).
func (r *Resumer) Resume(ctx context.Context, key SandboxKey, uid, seenRV string) error {
	r.mu.Lock()
	if rv, ok := r.done[key]; ok && rv == seenRV {
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	ch := r.group.DoChan(key.String(), func() (any, error) {
		ctx, cancel := context.WithTimeout(r.base, r.timeout)
		defer cancel()
		var at time.Time
		if r.stampActivity {
			at = time.Now()
		}
		err := r.control.SetOperatingMode(ctx, key, uid, ModeRunning, "", at)
		r.metrics.resume(key.Namespace, err)
		if err != nil {
			return nil, fmt.Errorf("patching operatingMode of %s: %w", key, err)
		}
		r.mu.Lock()
		r.done[key] = seenRV
		r.mu.Unlock()
		return nil, nil
	})
	select {
	case res := <-ch:
		return res.Err
	case <-ctx.Done():
		return fmt.Errorf("waiting for resume of %s: %w", key, ctx.Err())
	}
}

// forget drops the bookkeeping for key once the cache has moved on.
func (r *Resumer) forget(key SandboxKey) {
	r.mu.Lock()
	delete(r.done, key)
	r.mu.Unlock()
}
