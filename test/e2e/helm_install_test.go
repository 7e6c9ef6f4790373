package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/agent-sandbox/internal/platform"
)

// TestHelmInstallOnLocalCluster swaps the manifest install (`up` applies
// dist/sandbox-with-extensions.yaml) for `helm install charts/agent-sandbox`
// on the running cluster, checks that the controller and router become
// Available, and runs the smoke flows against that install: a warm claim on
// gVisor answering python through the router, and each example's smoke
// test (the manifest install runs them earlier). The manifest install is
// restored (and Available again) afterwards, also when the test fails, so
// the tests that run after it in any order find the usual install.
func TestHelmInstallOnLocalCluster(t *testing.T) {
	c := ensureController(t)
	helmBin := helmBinary(t)
	kubeconfig := cluster.KubeconfigPath()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	removeManifestInstall(ctx, t, c)
	t.Cleanup(func() {
		if out, err := runHelm(helmBin, kubeconfig, "uninstall", "agent-sandbox", "-n", platform.Namespace, "--wait", "--timeout=120s"); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
		waitControllerPodsGone(context.Background(), t, c)
		if err := platform.Install(context.Background(), restConfig); err != nil {
			t.Errorf("restoring the manifest install: %v", err)
		}
		if err := platform.WaitAvailable(context.Background(), restConfig); err != nil {
			t.Errorf("restored manifest install: %v", err)
		}
	})

	out, err := runHelm(helmBin, kubeconfig, "install", "agent-sandbox", filepath.Join(repoRoot(), "charts", "agent-sandbox"),
		"-n", platform.Namespace, "--create-namespace", "--wait", "--timeout=180s",
		// The local cluster has the images mkimages imported, under their local names.
		"--set", "image.repository=localhost/agent-sandbox/controller", "--set", "image.tag=dev",
		"--set", "router.image.repository=localhost/agent-sandbox/router", "--set", "router.image.tag=dev")
	if err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	if err := platform.WaitAvailable(ctx, restConfig); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	t.Logf("helm install: controller and router Available")
	claimAndRunPython(t, c, routerURL(t, c), platform.DefaultPool, "gvisor")
	// The examples' smoke tests, against this install.
	t.Run("chrome", TestExampleChrome)
	t.Run("jupyterlab", TestExampleJupyterLab)
	t.Run("code-interpreter-agent", TestExampleCodeInterpreterAgent)
}

// removeManifestInstall deletes what the embedded manifest installed, except
// the CRDs (deleting them would delete every Sandbox) and the namespace, and
// waits until no controller or router pod is left, so that two controllers
// never run at once.
func removeManifestInstall(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	data, err := platform.Manifest(platform.ManifestName)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decoding the manifest: %v", err)
		}
		switch u.GetKind() {
		case "", "CustomResourceDefinition", "Namespace":
			continue
		}
		if err := c.Delete(ctx, u, client.PropagationPolicy("Background")); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("deleting %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	waitControllerPodsGone(ctx, t, c)
}

func waitControllerPodsGone(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(platform.Namespace)); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pods still in %s", len(pods.Items), platform.Namespace)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// helmBinary returns the helm CLI that hack/helm/build.sh builds (it is part
// of `make deps`), building it when missing.
func helmBinary(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot(), "hack", "helm", "build.sh")).Output()
	if err != nil {
		t.Fatalf("hack/helm/build.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// runHelm runs helm against the local cluster with its state kept out of
// $HOME; the error carries the output.
func runHelm(bin, kubeconfig string, args ...string) (string, error) {
	home, err := os.MkdirTemp("", "e2e-helm-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(home)
	cmd := exec.Command(bin, append(args, "--kubeconfig", kubeconfig)...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w", args[0], err)
	}
	return string(out), nil
}
