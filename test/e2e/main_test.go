// Package e2e tests the project against the real local cluster: etcd,
// kube-apiserver, controller-manager, scheduler, containerd and kubelet
// started by internal/localcluster, with pods isolated by gVisor or runc.
// Nothing is faked and nothing is skipped: TestMain brings the cluster up
// (a no-op when it already runs) and fails loudly when it cannot.
//
// The cluster is left running afterwards so the next run starts in a second;
// set AGENT_SANDBOX_E2E_DOWN=1 to take it down at the end.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/agent-sandbox/internal/images"
	"sigs.k8s.io/agent-sandbox/internal/localcluster"
	"sigs.k8s.io/agent-sandbox/internal/platform"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// busyboxImage is a test image made from Debian's busybox-static: a shell,
// cat and httpd are all the tests need.
const busyboxImage = "localhost/agent-sandbox/e2e-busybox:v1"

var (
	cluster *localcluster.Cluster
	// clusterConfig is cluster's configuration, for tests that need a
	// Cluster of their own (their own progress output) on the same node.
	clusterConfig localcluster.Config
	restConfig    *rest.Config
	clientset     *kubernetes.Clientset
)

func TestMain(m *testing.M) {
	testenv.ExitIfShort("the local cluster (kubelet, containerd, gVisor; root)", "make test-e2e")
	// Tests talk to the cluster through controller-runtime clients; their
	// own logging stays off (errors reach the tests as return values).
	ctrllog.SetLogger(logr.Discard())
	if err := setup(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: cannot bring up the local cluster: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	if os.Getenv("AGENT_SANDBOX_E2E_DOWN") == "1" {
		if err := cluster.Down(context.Background(), false); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: down: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func setup() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the e2e tests run a real kubelet and containerd and need root")
	}
	cfg := localcluster.DefaultConfig()
	img, err := buildBusyboxImage(cfg.CacheDir)
	if err != nil {
		return err
	}
	// The platform runs the way a user's cluster runs it: controller and
	// router as pods from the locally built images (`make images`).
	tars, err := platform.ImageTarballs(cfg.CacheDir)
	if err != nil {
		return err
	}
	cfg.Images = append(append(cfg.Images, tars...), img)
	cfg.PostUp = platform.Hooks()
	clusterConfig = cfg
	start := time.Now()
	cluster = localcluster.New(cfg, func(s string) {
		fmt.Fprintf(os.Stderr, "e2e up [%5.1fs] %s\n", time.Since(start).Seconds(), s)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := cluster.Up(ctx); err != nil {
		return err
	}
	return connect()
}

func connect() error {
	var err error
	restConfig, err = cluster.RESTConfig()
	if err != nil {
		return err
	}
	restConfig.QPS, restConfig.Burst = 100, 200
	clientset, err = kubernetes.NewForConfig(restConfig)
	return err
}

// repoRoot is the repository root, found from this source file.
func repoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// buildBusyboxImage writes the test image archive.
func buildBusyboxImage(cacheDir string) (string, error) {
	busybox, err := images.Busybox(context.Background(), os.Stderr)
	if err != nil {
		return "", fmt.Errorf("no static busybox (run `make deps`, it installs busybox-static): %w", err)
	}
	spec := images.Spec{
		Ref:        busyboxImage,
		Files:      []images.File{{Path: "/bin/busybox", Mode: 0o755, Source: busybox}},
		Dirs:       []images.Dir{{Path: "/tmp", Mode: 0o1777}},
		Entrypoint: []string{"/bin/sh"},
	}
	for _, a := range []string{"sh", "cat", "echo", "httpd", "sleep", "ls", "mkdir", "uname", "nc", "id", "ps", "ip"} {
		spec.Symlinks = append(spec.Symlinks, images.Symlink{Path: "/bin/" + a, Target: "busybox"})
	}
	out := filepath.Join(cacheDir, "images", "e2e-busybox-v1.tar")
	// Rebuilt every run: cheap (reproducible, so the import is skipped when
	// nothing changed), and keeps the archive in step with this code.
	_, err = images.WriteTarball(spec, out)
	return out, err
}
