// Package testenv starts a real kube-apiserver and etcd (controller-runtime's
// envtest) with the project's CRDs installed, for integration tests. The
// binaries are built from source by hack/kube/build.sh and cached under
// ~/.cache/agent-sandbox/bin/<kube-version>; nothing is faked.
package testenv

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"sigs.k8s.io/agent-sandbox/internal/scheme"
)

// KubeVersion is the Kubernetes release whose binaries the tests run.
const KubeVersion = "v1.37.2"

// Env is a running test apiserver.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *runtime.Scheme
	// AssetsDir holds kube-apiserver, etcd and kubectl.
	AssetsDir string
	// Kubeconfig is a kubeconfig file for the admin user (for kubectl).
	Kubeconfig string

	env *envtest.Environment
}

// RepoRoot returns the repository root, found from this source file.
func RepoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// AssetsDir returns where hack/kube/build.sh puts the binaries, honouring
// KUBEBUILDER_ASSETS when set.
func AssetsDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	cache := os.Getenv("AGENT_SANDBOX_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "agent-sandbox")
	}
	return filepath.Join(cache, "bin", KubeVersion)
}

// NewScheme returns a scheme with the core Kubernetes types, CRDs and every
// API group of this project.
func NewScheme() *runtime.Scheme {
	return scheme.Must(apiextensionsv1.AddToScheme)
}

// Start starts an apiserver with the CRDs of k8s/crd installed. It fails
// (never skips) when the binaries are missing, saying how to build them.
func Start() (*Env, error) {
	assets := AssetsDir()
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("test apiserver binary %s missing in %s: run `make deps-test` (hack/kube/build.sh) first: %w", bin, assets, err)
		}
	}
	scheme := NewScheme()
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "k8s", "crd")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		Scheme:                scheme,
	}
	// envtest gives each component 20 s to start; on a 2-core machine with
	// other suites running the apiserver alone can take longer. The
	// KUBEBUILDER_CONTROLPLANE_START_TIMEOUT variable still wins when set.
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		env.ControlPlaneStartTimeout = 2 * time.Minute
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting test apiserver: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("creating client: %w", err)
	}
	e := &Env{Config: cfg, Client: c, Scheme: scheme, AssetsDir: assets, env: env}
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("adding admin user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("rendering kubeconfig: %w", err)
	}
	f, err := os.CreateTemp("", "testenv-kubeconfig-*")
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("writing kubeconfig: %w", err)
	}
	if _, err := f.Write(kc); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("writing kubeconfig: %w", err)
	}
	_ = f.Close()
	e.Kubeconfig = f.Name()
	return e, nil
}

// Stop stops the apiserver and etcd and removes temporary files.
func (e *Env) Stop() error {
	if e.Kubeconfig != "" {
		_ = os.Remove(e.Kubeconfig)
	}
	return e.env.Stop()
}

// IntegrationTarget is the make target that runs the tests SkipShort skips.
const IntegrationTarget = "make test-integration"

// SkipShort skips a test that needs the apiserver when `go test -short` runs
// (the `make test-unit` tier), naming the target that does run it. Packages
// whose TestMain uses Main call it from their fixtures: under -short Main
// starts nothing, so a test that reaches the apiserver without it would
// dereference a nil Env.
func SkipShort(t testing.TB) {
	t.Helper()
	SkipShortNeeds(t, "a kube-apiserver and etcd")
}

// SkipShortNeeds is SkipShort for a test that needs more than the apiserver
// (a devstack, a built image); needs says what, for the skip message.
func SkipShortNeeds(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: skipped under -short, run by `%s`", needs, IntegrationTarget)
	}
}

// ExitIfShort ends a test binary under -short before its TestMain starts
// anything, for packages where every test needs the stack (the e2e cluster,
// the devstack, an installed chart). Call it first in TestMain.
// target is the make target that runs them.
func ExitIfShort(needs, target string) {
	flag.Parse()
	if testing.Short() {
		fmt.Printf("skipping every test: they need %s; skipped under -short, run by `%s`\n", needs, target)
		os.Exit(0)
	}
}

// Main runs a test package's tests against one shared apiserver: use it from
// TestMain. It exits non-zero when the apiserver cannot start. Under -short it
// starts nothing and leaves *env nil, so the package's pure-logic tests still
// run in the fast tier while the rest skip through SkipShort.
func Main(m *testing.M, env **Env) {
	// testing.Short reads the parsed flags; m.Run would parse them too late.
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	e, err := Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stopping: %v\n", err)
	}
	os.Exit(code)
}
