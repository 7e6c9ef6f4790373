// Package install tests what users install: the kustomize base in k8s/, the
// release manifests hack/release-manifests.sh renders from it, and the Helm
// chart in charts/agent-sandbox. Every rendering is validated against a real
// kube-apiserver (internal/testenv) with server-side dry-run apply, the chart
// is linted and installed with Helm built from its Go module (hack/helm), and
// bad chart values must fail with a message naming the value.
//
// Running the installed controller and router needs a node; that is the job
// of the local cluster (`agent-sandbox up`) and test/e2e.
package install

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// Namespace is where every install puts the controller and the router.
const Namespace = "agent-sandbox-system"

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.ExitIfShort("helm and a kube-apiserver", "make test-integration")
	testenv.Main(m, &env)
}

// repo returns the path of a file in the repository.
func repo(parts ...string) string {
	return filepath.Join(append([]string{testenv.RepoRoot()}, parts...)...)
}

// command runs name with args in the repository root and returns stdout; on
// failure the error carries stderr.
func command(ctx context.Context, extraEnv []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func mustRun(t *testing.T, extraEnv []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := command(ctx, extraEnv, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubectlBin is the kubectl hack/kube/build.sh builds next to the apiserver.
func kubectlBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(env.AssetsDir, "kubectl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kubectl missing from %s: run `make deps-test` (hack/kube/build.sh): %v", env.AssetsDir, err)
	}
	return bin
}

// kubectl runs kubectl against the test apiserver.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return mustRun(t, nil, kubectlBin(t), append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
}

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helmBin returns the helm binary built by hack/helm/build.sh, building it on
// first use (several minutes once, then cached).
func helmBin(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		var out string
		out, helmErr = command(ctx, nil, repo("hack", "helm", "build.sh"))
		helmPath = strings.TrimSpace(out)
		if helmErr == nil {
			lines := strings.Split(helmPath, "\n")
			helmPath = lines[len(lines)-1]
		}
	})
	if helmErr != nil {
		t.Fatalf("building helm: %v", helmErr)
	}
	return helmPath
}

// helm runs helm; an error carries stderr.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Keep Helm's config, cache and repositories out of $HOME.
	home := t.TempDir()
	return command(ctx, []string{
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"),
	}, helmBin(t), args...)
}

// helmTemplate renders the chart with the given extra arguments.
func helmTemplate(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := helm(t, append([]string{"template", "agent-sandbox", repo("charts", "agent-sandbox"),
		"--namespace", Namespace, "--include-crds"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(out)
}

// kustomizeVariant renders k8s/ with the given components. Kustomize refuses
// a base that contains the kustomization and absolute paths, so the
// kustomization lives in a temporary directory and points at k8s/ relatively,
// like hack/release-manifests.sh does.
func kustomizeVariant(t *testing.T, components ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, repo("k8s"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\n", rel)
	if len(components) > 0 {
		b.WriteString("components:\n")
		for _, c := range components {
			fmt.Fprintf(&b, "- %s\n", filepath.Join(rel, "components", c))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return []byte(mustRun(t, nil, kubectlBin(t), "kustomize", dir))
}

// decode splits multi-document YAML into objects, skipping empty documents.
// Numbers decode as in the apiserver: integers as int64.
func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading manifests: %v", err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("decoding manifest: %v\n%s", err, doc)
		}
		if s := string(bytes.TrimSpace(js)); s == "null" || s == "{}" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatalf("decoding manifest: %v\n%s", err, doc)
		}
		out = append(out, u)
	}
}

// key identifies an object: Kind/namespace/name.
func key(u *unstructured.Unstructured) string {
	return u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
}

func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if _, dup := m[key(o)]; dup {
			t.Fatalf("object %s rendered twice", key(o))
		}
		m[key(o)] = o
	}
	return m
}

func keys(objs []*unstructured.Unstructured) []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, key(o))
	}
	slices.Sort(ks)
	return ks
}

// get returns the object with key k or fails.
func get(t *testing.T, objs []*unstructured.Unstructured, k string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if key(o) == k {
			return o
		}
	}
	t.Fatalf("no %s among %v", k, keys(objs))
	return nil
}

// ensureNamespace creates the install namespace for real: a dry-run create
// of a namespaced object in a namespace that does not exist fails.
func ensureNamespace(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if err := env.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// dryRunApply sends manifests to the apiserver with server-side apply and
// --dry-run=server, so every object goes through decoding, defaulting,
// validation (OpenAPI, CEL, RBAC escalation checks) and admission, and with
// a client-side apply dry run, which also checks that the
// last-applied-configuration annotation of the largest CRD fits.
func dryRunApply(t *testing.T, name string, manifests []byte) {
	t.Helper()
	ensureNamespace(t)
	file := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(file, manifests, 0o644); err != nil {
		t.Fatal(err)
	}
	// --force-conflicts: envtest installed the CRDs with conversion None
	// (its scheme serves no webhook); a real install has no such owner.
	out := kubectl(t, "apply", "--server-side", "--field-manager=install-test", "--force-conflicts", "--dry-run=server", "-f", file)
	n := len(decode(t, manifests))
	if got := strings.Count(out, "(server dry run)"); got != n {
		t.Fatalf("server-side dry run of %s applied %d of %d objects:\n%s", name, got, n, out)
	}
	kubectl(t, "apply", "--dry-run=server", "-f", file)
}
