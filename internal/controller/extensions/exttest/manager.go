package exttest

import (
	"context"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/index"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// PassManager is a manager for tests that drive one reconciler pass by
// pass: its client reads from a real informer cache on the test apiserver,
// every write goes through writes, and the extension indexes are registered.
// Add watches to it, then call Run.
type PassManager struct {
	ctrl.Manager
	t      testing.TB
	ctx    context.Context
	cancel context.CancelFunc
}

// NewPassManager builds the manager; it stops when the test ends.
func NewPassManager(t testing.TB, env *testenv.Env, writes *WriteCounter) *PassManager {
	t.Helper()
	testenv.SkipShort(t)
	cfg := writes.Wrap(rest.CopyConfig(env.Config))
	cfg.QPS, cfg.Burst = -1, 1000
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := index.Register(ctx, mgr.GetFieldIndexer()); err != nil {
		cancel()
		t.Fatal(err)
	}
	return &PassManager{Manager: mgr, t: t, ctx: ctx, cancel: cancel}
}

// Run starts the manager, which runs until the test ends and waits for its cache.
func (m *PassManager) Run() {
	m.t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Start(m.ctx) }()
	m.t.Cleanup(func() { m.cancel(); <-done })
	if !m.GetCache().WaitForCacheSync(m.ctx) {
		m.t.Fatal("cache did not sync")
	}
}
