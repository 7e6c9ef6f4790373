// Package harness starts a controller manager running the Sandbox
// controller and the extension controllers against the real test
// apiserver. It is imported only by tests and benchmarks.
package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"sigs.k8s.io/agent-sandbox/internal/controller/extensions"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/controller/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
	"sigs.k8s.io/agent-sandbox/internal/transport"
)

// ManagerOptions configure StartManager.
type ManagerOptions struct {
	// Extensions are passed to extensions.Setup.
	Extensions extensions.Options
	// NoExtensions runs the Sandbox controller alone.
	NoExtensions bool
	// NoSandboxController runs the extension controllers alone.
	NoSandboxController bool
	// Sandbox configures the Sandbox controller; nil means the
	// command-line defaults (100 workers, 1s status coalescing window).
	Sandbox *sandbox.Options
	// Writes, when set, counts the manager's apiserver writes.
	Writes *exttest.WriteCounter
	// Setup runs extra setup (e.g. a custom reconciler) before start.
	Setup func(mgr ctrl.Manager) error
	// Transport shards API connections (zero value: one shared connection).
	Transport transport.Options
}

// Manager is a running controller manager.
type Manager struct {
	ctrl.Manager
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// StartManager starts a manager against env and stops it when the test
// ends (or earlier with Stop).
func StartManager(t testing.TB, env *testenv.Env, opts ManagerOptions) *Manager {
	t.Helper()
	if opts.Transport.Connections == 0 {
		opts.Transport.Connections = 1
	}
	cfg, watchClient, err := transport.Apply(env.Config, opts.Transport)
	if err != nil {
		t.Fatalf("API connections: %v", err)
	}
	if opts.Writes != nil {
		cfg = opts.Writes.Wrap(cfg)
	}
	// No client-side throttling: the apiserver's own flow control is what
	// the controllers must live with.
	cfg.QPS, cfg.Burst = -1, 1000
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache: cache.Options{HTTPClient: watchClient, DefaultTransform: func(obj any) (any, error) {
			if o, ok := obj.(metav1.Object); ok {
				o.SetManagedFields(nil)
			}
			return obj, nil
		}},
	})
	if err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	if !opts.NoSandboxController {
		so := sandbox.Options{Workers: 100, StatusCoalesceWindow: time.Second}
		if opts.Sandbox != nil {
			so = *opts.Sandbox
		}
		if err := sandbox.SetupWithManager(mgr, so); err != nil {
			t.Fatalf("setting up sandbox controller: %v", err)
		}
	}
	if !opts.NoExtensions {
		if err := extensions.Setup(mgr, opts.Extensions); err != nil {
			t.Fatalf("setting up extensions: %v", err)
		}
	}
	if opts.Setup != nil {
		if err := opts.Setup(mgr); err != nil {
			t.Fatalf("extra setup: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{Manager: mgr, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		cancel()
		t.Fatalf("manager cache did not sync")
	}
	t.Cleanup(m.Stop)
	return m
}

// Stop stops the manager and waits until every reconcile has returned.
func (m *Manager) Stop() {
	m.once.Do(func() {
		m.cancel()
		if err := <-m.done; err != nil && !errors.Is(err, context.Canceled) {
			fmt.Printf("manager stopped with error: %v\n", err)
		}
	})
}
