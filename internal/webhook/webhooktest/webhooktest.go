// Package webhooktest starts a real kube-apiserver + etcd (envtest) with the
// project's CRDs whose conversion webhooks are served by the controller's
// own webhook code (internal/webhook), for integration tests of anything
// that reads or writes v1alpha1. envtest routes the CRDs to a local HTTPS
// server with a test CA; nothing is faked.
package webhooktest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"sigs.k8s.io/agent-sandbox/internal/manager"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
	"sigs.k8s.io/agent-sandbox/internal/webhook"
)

// Env is a running apiserver with the conversion webhook served.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *runtime.Scheme

	env    *envtest.Environment
	cancel context.CancelFunc
}

// Start starts the apiserver and a manager serving /convert.
func Start() (*Env, error) {
	scheme, err := manager.NewScheme()
	if err != nil {
		return nil, err
	}
	assets := testenv.AssetsDir()
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("test apiserver binary %s missing in %s: run hack/kube/build.sh first: %w", bin, assets, err)
		}
	}
	te := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(testenv.RepoRoot(), "k8s", "crd")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		Scheme:                scheme,
		// Empty options still make envtest generate a serving CA and route
		// the convertible CRDs' webhooks to LocalServingHost:Port.
		WebhookInstallOptions: envtest.WebhookInstallOptions{},
	}
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("starting test apiserver: %w", err)
	}
	e := &Env{Config: cfg, Scheme: scheme, env: te}
	fail := func(err error) (*Env, error) { _ = e.Stop(); return nil, err }
	if e.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return fail(err)
	}
	wo := te.WebhookInstallOptions
	mgr, err := manager.New(cfg, manager.Options{
		MetricsBindAddress:     "0",
		HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{
			Enable: true, Port: wo.LocalServingPort, CertDir: wo.LocalServingCertDir,
			CertName: webhook.DefaultCertName, KeyName: webhook.DefaultKeyName,
		}, nil),
	})
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	if err := webhook.Setup(ctx, mgr, nil); err != nil {
		return fail(err)
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "webhooktest: manager: %v\n", err)
		}
	}()
	if err := waitServing(ctx, mgr.GetWebhookServer()); err != nil {
		return fail(err)
	}
	return e, nil
}

// Stop stops the manager and the apiserver.
func (e *Env) Stop() error {
	if e.cancel != nil {
		e.cancel()
	}
	return e.env.Stop()
}

// waitServing polls the webhook server's own readiness check.
func waitServing(ctx context.Context, srv ctrlwebhook.Server) error {
	check := srv.StartedChecker()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := check(nil)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("webhook server not serving: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
