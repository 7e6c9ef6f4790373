package webhook

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	"sigs.k8s.io/agent-sandbox/internal/manager"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// The package's tests share one real kube-apiserver + etcd. envtest points
// the project's CRDs' conversion webhooks at a local HTTPS server (its own
// test CA), and that server is the controller's conversion webhook built
// by Setup, the same code path as the controller binary.
var (
	// convertURL and servingCA reach the webhook server directly.
	convertURL string
	servingCA  []byte

	cfg    *rest.Config
	k8s    client.Client
	scheme *runtime.Scheme
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if scheme, err = manager.NewScheme(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Under -short (make test-unit) nothing starts; the tests that need the
	// apiserver skip in testCtx or newNamespace.
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	assets := testenv.AssetsDir()
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			fmt.Fprintf(os.Stderr, "test apiserver binary %s missing in %s: run hack/kube/build.sh first\n", bin, assets)
			return 1
		}
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(testenv.RepoRoot(), "k8s", "crd")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		Scheme:                scheme,
		// Empty options still make envtest generate a serving CA and route
		// the convertible CRDs' webhooks to LocalServingHost:Port.
		WebhookInstallOptions: envtest.WebhookInstallOptions{},
	}
	if cfg, err = env.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "starting test apiserver: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Created here rather than by envtest, which would strip the conversion
	// stanza of CRDs whose types are not in the scheme.
	if err := createTestCRDs(filepath.Join("testdata", "widgets.yaml")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	wo := env.WebhookInstallOptions
	convertURL = fmt.Sprintf("https://%s:%d/convert", wo.LocalServingHost, wo.LocalServingPort)
	servingCA = wo.LocalServingCAData
	mgr, err := manager.New(cfg, manager.Options{
		MetricsBindAddress:     "0",
		HealthProbeBindAddress: "0",
		WebhookServer: NewServer(Options{
			Enable: true, Port: wo.LocalServingPort, CertDir: wo.LocalServingCertDir,
			CertName: DefaultCertName, KeyName: DefaultKeyName,
		}, nil),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := Setup(ctx, mgr, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		}
	}()
	if err := waitServing(ctx, mgr.GetWebhookServer()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// waitServing polls the webhook server's own readiness check.
func waitServing(ctx context.Context, srv ctrlwebhook.Server) error {
	check := srv.StartedChecker()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := check(nil); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("webhook server not serving: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func createTestCRDs(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal([]byte(doc), crd); err != nil {
			return fmt.Errorf("parsing %s: %w", path, err)
		}
		if err := k8s.Create(context.Background(), crd); err != nil {
			return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
	}
	return nil
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	testenv.SkipShort(t)
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}
