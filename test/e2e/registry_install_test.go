package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/agent-sandbox/internal/platform"
)

// registryTag is what the registry tests push; not "dev", so nothing the
// local cluster imported from tarballs can stand in for a pulled image.
const registryTag = "e2e-registry"

// registryPool is the warm pool whose template runs the pushed
// python-runtime image.
const registryPool = "registry-python-pool"

// pushed is one image `make push` uploaded.
type pushed struct{ name, ref, digest string }

// TestRegistryInstall installs agent-sandbox the way a real cluster gets it:
// a real OCI registry (distribution) on the node's address, `make push` of
// the images to it, the images removed from containerd, then (1) a Helm
// install with the reference chart's values naming that registry and (2) a
// `kubectl apply` of the rendered dist/sandbox-with-extensions.yaml. Each
// time a warm claim runs Python in a pod whose image was pulled, and the
// digests containerd pulled equal the ones pushed. The manifest install is
// restored afterwards.
func TestRegistryInstall(t *testing.T) {
	c := ensureController(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	if err := cluster.StartRegistry(ctx); err != nil {
		t.Fatalf("starting the registry: %v", err)
	}
	// Registered first, so it runs last: once the registry names are gone
	// and the manifest install is back, a new pool of the locally imported
	// python-runtime image still serves warm claims. (The kubelet once
	// refused exactly that after it had pulled the same image ID under the
	// registry's name, see kubeletConfig in internal/localcluster.)
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		const pool = "after-registry-pool"
		ensurePool(t, c, pool, "gvisor")
		claimAndRunPython(t, c, routerURL(t, c), pool, "gvisor")
	})
	t.Cleanup(cluster.StopRegistry)
	prefix := cluster.Config().RegistryAddr() + "/agent-sandbox"

	images := makePush(ctx, t, prefix)
	removeFromContainerd(ctx, t, images)

	removeManifestInstall(ctx, t, c)
	t.Cleanup(func() {
		ctx := context.Background()
		deleteRegistryPool(ctx, t, c)
		removeManifestInstall(ctx, t, c)
		if err := platform.Install(ctx, restConfig); err != nil {
			t.Errorf("restoring the manifest install: %v", err)
		}
		if err := platform.WaitAvailable(ctx, restConfig); err != nil {
			t.Errorf("restored manifest install: %v", err)
		}
	})

	t.Run("helm", func(t *testing.T) {
		helmBin := helmBinary(t)
		kubeconfig := cluster.KubeconfigPath()
		out, err := runHelm(helmBin, kubeconfig, "install", "agent-sandbox", filepath.Join(repoRoot(), "charts", "agent-sandbox"),
			"-n", platform.Namespace, "--create-namespace", "--wait", "--timeout=300s",
			"--set", "image.repository="+prefix+"/agent-sandbox-controller", "--set", "image.tag="+registryTag,
			"--set", "image.pullPolicy=IfNotPresent",
			"--set", "router.image.repository="+prefix+"/sandbox-router-go", "--set", "router.image.tag="+registryTag,
			"--set", "controller.extensions=true", "--set", "replicaCount=1")
		if err != nil {
			t.Fatalf("helm install: %v\n%s", err, out)
		}
		defer func() {
			deleteRegistryPool(context.Background(), t, c)
			if out, err := runHelm(helmBin, kubeconfig, "uninstall", "agent-sandbox", "-n", platform.Namespace, "--wait", "--timeout=120s"); err != nil {
				t.Errorf("helm uninstall: %v\n%s", err, out)
			}
			waitControllerPodsGone(context.Background(), t, c)
		}()
		runPulledPython(ctx, t, c, prefix, images)
	})

	t.Run("manifests", func(t *testing.T) {
		removeFromContainerd(ctx, t, images)
		dir := t.TempDir()
		cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(), "hack", "release-manifests.sh"))
		cmd.Env = append(os.Environ(), "REGISTRY="+prefix, "TAG="+registryTag, "OUT_DIR="+dir, "KUBECTL="+cluster.KubectlPath(), "IMAGE_REPO=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("release-manifests: %v\n%s", err, out)
		}
		manifest := filepath.Join(dir, "sandbox-with-extensions.yaml")
		if out, err := exec.CommandContext(ctx, cluster.KubectlPath(), "--kubeconfig", cluster.KubeconfigPath(),
			"apply", "--server-side", "--force-conflicts", "-f", manifest).CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
		defer func() {
			deleteRegistryPool(context.Background(), t, c)
			removeManifestInstall(context.Background(), t, c)
		}()
		if err := platform.WaitAvailable(ctx, restConfig); err != nil {
			t.Fatalf("kubectl apply of %s: %v", manifest, err)
		}
		runPulledPython(ctx, t, c, prefix, images)
	})
}

// makePush runs `make push` to the registry at prefix and returns what it
// pushed (mkimages prints name, reference, index digest, platforms).
func makePush(ctx context.Context, t *testing.T, prefix string) map[string]pushed {
	t.Helper()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "make", "-C", repoRoot(), "push", "REGISTRY="+prefix, "TAG="+registryTag, "INSECURE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make push: %v\n%s", err, out)
	}
	images := map[string]pushed{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) == 4 && strings.HasPrefix(f[1], prefix+"/") && strings.HasPrefix(f[2], "sha256:") {
			images[f[0]] = pushed{name: f[0], ref: f[1], digest: f[2]}
			t.Logf("pushed %s = %s (%s)", f[1], f[2], f[3])
		}
	}
	for _, n := range []string{"controller", "router", "sandboxd", "python-runtime"} {
		if _, ok := images[n]; !ok {
			t.Fatalf("make push did not report %s:\n%s", n, out)
		}
	}
	if !strings.Contains(string(out), "linux/amd64,linux/arm64") {
		t.Errorf("no image was pushed for both amd64 and arm64:\n%s", out)
	}
	t.Logf("make push: %d images in %s", len(images), time.Since(start).Round(time.Second))
	return images
}

// containerdImages maps each image reference containerd's CRI namespace
// holds to its target digest.
func containerdImages(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	out, err := cluster.Ctr(ctx, "images", "ls")
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]string{}
	for _, line := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 3 {
			refs[f[0]] = f[2]
		}
	}
	return refs
}

// removeFromContainerd removes the pushed references from the node, so the
// next pods must pull them from the registry.
func removeFromContainerd(ctx context.Context, t *testing.T, images map[string]pushed) {
	t.Helper()
	present := containerdImages(ctx, t)
	for _, img := range images {
		if _, ok := present[img.ref]; !ok {
			continue
		}
		if out, err := cluster.Ctr(ctx, "images", "rm", "--sync", img.ref); err != nil {
			t.Fatalf("removing %s from containerd: %v\n%s", img.ref, err, out)
		}
	}
	present = containerdImages(ctx, t)
	for _, img := range images {
		if _, ok := present[img.ref]; ok {
			t.Fatalf("%s is still in containerd after removal", img.ref)
		}
	}
}

// runPulledPython creates a warm pool whose template runs the pushed
// python-runtime image, claims from it and runs Python through the router,
// then checks that containerd pulled exactly the pushed digests of the
// controller, router and python-runtime images and that the pods run them.
func runPulledPython(ctx context.Context, t *testing.T, c client.Client, prefix string, images map[string]pushed) {
	t.Helper()
	createRegistryPool(ctx, t, c, images["python-runtime"].ref)
	claimAndRunPython(t, c, routerURL(t, c), registryPool, "gvisor")

	present := containerdImages(ctx, t)
	for _, n := range []string{"controller", "router", "python-runtime"} {
		img := images[n]
		got, ok := present[img.ref]
		if !ok {
			t.Errorf("%s was not pulled into containerd", img.ref)
			continue
		}
		if got != img.digest {
			t.Errorf("containerd pulled %s as %s; pushed %s", img.ref, got, img.digest)
		} else {
			t.Logf("pulled %s = pushed digest %s", img.ref, got)
		}
	}
	// The running pods name the registry's images.
	for ns, sel := range map[string]client.MatchingLabels{
		platform.Namespace:      {"app": "agent-sandbox-controller"},
		metav1.NamespaceDefault: {"app": "python-runtime-registry"},
	} {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), sel); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			t.Errorf("no pods %v in %s", sel, ns)
		}
		for _, p := range pods.Items {
			for _, s := range p.Status.ContainerStatuses {
				if !strings.HasPrefix(s.Image, prefix+"/") {
					t.Errorf("pod %s/%s runs %s, not an image from %s", ns, p.Name, s.Image, prefix)
				}
			}
		}
	}
}

// createRegistryPool makes SandboxTemplate and SandboxWarmPool
// registryPool from examples/python-runtime with the pushed image.
func createRegistryPool(ctx context.Context, t *testing.T, c client.Client, image string) {
	t.Helper()
	read := func(name string) *unstructured.Unstructured {
		data, err := os.ReadFile(filepath.Join(repoRoot(), "examples", "python-runtime", name))
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &u.Object); err != nil {
			t.Fatal(err)
		}
		u.SetNamespace(metav1.NamespaceDefault)
		return u
	}
	tmpl := read("sandboxtemplate.yaml")
	tmpl.SetName(registryPool + "-template")
	containers, _, _ := unstructured.NestedSlice(tmpl.Object, "spec", "podTemplate", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("examples/python-runtime template has %d containers", len(containers))
	}
	containers[0].(map[string]any)["image"] = image
	if err := unstructured.SetNestedSlice(tmpl.Object, containers, "spec", "podTemplate", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(tmpl.Object, "python-runtime-registry", "spec", "podTemplate", "metadata", "labels", "app"); err != nil {
		t.Fatal(err)
	}
	pool := read("sandboxwarmpool.yaml")
	pool.SetName(registryPool)
	if err := unstructured.SetNestedField(pool.Object, tmpl.GetName(), "spec", "sandboxTemplateRef", "name"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(pool.Object, int64(1), "spec", "replicas"); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*unstructured.Unstructured{tmpl, pool} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// deleteRegistryPool removes the pool and its template and waits until the
// pool's pods are gone (so the next install starts without them).
func deleteRegistryPool(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	for _, kind := range []string{"SandboxWarmPool", "SandboxTemplate"} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("extensions.agents.x-k8s.io/v1beta1")
		u.SetKind(kind)
		u.SetNamespace(metav1.NamespaceDefault)
		u.SetName(registryPool)
		if kind == "SandboxTemplate" {
			u.SetName(registryPool + "-template")
		}
		if err := c.Delete(ctx, u, client.PropagationPolicy("Foreground")); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s: %v", kind, err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(metav1.NamespaceDefault), client.MatchingLabels{"app": "python-runtime-registry"}); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d pods of %s still exist", len(pods.Items), registryPool)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestRefSDK builds and runs test/refsdk, a module of its own written only
// against the reference project's public Go surface (the Go SDK and the
// typed clientset at the reference's import paths), against the local
// cluster's default warm pool.
func TestRefSDK(t *testing.T) {
	c := ensureController(t)
	waitPoolReady(t, c, platform.DefaultPool)
	dir := filepath.Join(repoRoot(), "test", "refsdk")
	bin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+"/", "./cmd/sdk", "./cmd/clientset")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building test/refsdk: %v\n%s", err, out)
	}
	env := append(os.Environ(), "KUBECONFIG="+cluster.KubeconfigPath())
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"sdk", []string{"-pool", platform.DefaultPool, "-namespace", metav1.NamespaceDefault, "-api-url", routerURL(t, c)},
			[]string{"claim=", "sandbox=" + platform.DefaultPool + "-", "run=42", "files=ok", "get=ok"}},
		{"clientset", []string{"-pool", platform.DefaultPool, "-namespace", metav1.NamespaceDefault},
			[]string{"claim=refsdk-clientset-", "sandbox=" + platform.DefaultPool + "-", "sandbox-uid="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(ctx, filepath.Join(bin, tc.name), tc.args...)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s %v: %v\n%s", tc.name, tc.args, err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("%s printed no %q:\n%s", tc.name, w, out)
				}
			}
			t.Logf("%s:\n%s", tc.name, out)
		})
	}
}
