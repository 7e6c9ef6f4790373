package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	sblabels "sigs.k8s.io/agent-sandbox/internal/labels"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// TestCacheBackedResolution: the router resolves from its Sandbox/Pod
// informers only, and refuses addresses the cache does not tie to the
// named sandbox.
func TestCacheBackedResolution(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	node := startFakeNode(t, ns)
	a := backend(t, "127.0.0.31", "alpha")
	b := backend(t, "127.0.0.32", "beta")
	node.set("alpha", a.Addr(), false)
	node.set("beta", b.Addr(), false)
	newSandbox(t, ns, "alpha", sandboxv1beta1.OperatingModeRunning, a.Port())
	newSandbox(t, ns, "beta", sandboxv1beta1.OperatingModeRunning, b.Port())
	r := startRouter(t, ns, "--ready-timeout=20s")

	if got := r.get(t, ns, "alpha", a.Port()); got.code != 200 || got.body != "alpha" {
		t.Fatalf("alpha: %+v", got)
	}
	if got := r.get(t, ns, "beta", b.Port(), "X-Sandbox-Pod-IP", b.Addr().String()); got.code != 200 || got.body != "beta" {
		t.Fatalf("beta with matching hint: %+v", got)
	}
	// Another sandbox's pod IP as a hint: refused.
	if got := r.get(t, ns, "alpha", a.Port(), "X-Sandbox-Pod-IP", b.Addr().String()); got.code != 403 {
		t.Fatalf("foreign hint: %+v", got)
	}
	// A port the pod template does not declare (and not a default port).
	if got := r.get(t, ns, "alpha", b.Port()); got.code != 403 {
		t.Fatalf("undeclared port: %+v", got)
	}
	// The UID pins the incarnation.
	uid := string(getSandbox(t, ns, "alpha").UID)
	if got := r.get(t, ns, "alpha", a.Port(), "X-Sandbox-UID", uid); got.code != 200 {
		t.Fatalf("matching UID: %+v", got)
	}
	if got := r.get(t, ns, "alpha", a.Port(), "X-Sandbox-UID", "not-"+uid); got.code != 403 {
		t.Fatalf("other UID: %+v", got)
	}
	// A pod that claims alpha's name but is not controlled by alpha is not
	// a target: a stray pod with beta's address labelled like a sandbox pod.
	stray := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stray", Namespace: ns,
		Labels: map[string]string{sblabels.SandboxNameHash: sblabels.NameHash("alpha")}},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if err := env.Client.Create(context.Background(), stray); err != nil {
		t.Fatal(err)
	}
	if got := r.get(t, ns, "alpha", a.Port(), "X-Sandbox-Pod-IP", "127.0.0.33"); got.code != 403 {
		t.Fatalf("stray pod address: %+v", got)
	}
	// Unknown and deleted sandboxes are 404.
	if got := r.get(t, ns, "ghost", a.Port()); got.code != 404 {
		t.Fatalf("unknown: %+v", got)
	}
	if err := env.Client.Delete(context.Background(), getSandbox(t, ns, "beta")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deleted sandbox to disappear", func() bool { return r.get(t, ns, "beta", b.Port()).code == 404 })
}

// TestAutoResume: a Suspended sandbox is woken by the first request, which
// is held until the sandbox is Ready and then answered by its backend;
// concurrent requests share one resume.
func TestAutoResume(t *testing.T) {
	ns := newNamespace(t)
	node := startFakeNode(t, ns)
	be := backend(t, "127.0.0.41", "resumed")
	node.set("sleepy", be.Addr(), false)
	newSandbox(t, ns, "sleepy", sandboxv1beta1.OperatingModeSuspended, be.Port())
	eventually(t, "suspended status", func() bool {
		sb := getSandbox(t, ns, "sleepy")
		return len(sb.Status.Conditions) > 0
	})
	r := startRouter(t, ns, "--ready-timeout=20s")

	const n = 10
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i] = r.get(t, ns, "sleepy", be.Port()) })
	}
	wg.Wait()
	for i, got := range results {
		if got.code != 200 || got.body != "resumed" {
			t.Fatalf("request %d: %+v", i, got)
		}
	}
	if sb := getSandbox(t, ns, "sleepy"); sb.Spec.OperatingMode != sandboxv1beta1.OperatingModeRunning {
		t.Fatalf("operatingMode %q", sb.Spec.OperatingMode)
	}
	series := fmt.Sprintf(`sandbox_router_resumes_total{outcome="success",sandbox_namespace="%s"}`, ns)
	if got := r.metric(t, series); got != "1" {
		t.Fatalf("%d concurrent requests made %q resume patches, want 1", n, got)
	}
	// Later requests go straight through.
	if got := r.get(t, ns, "sleepy", be.Port()); got.code != 200 {
		t.Fatalf("after resume: %+v", got)
	}
}

// TestResumeTimeout: a sandbox that does not become Ready within
// --ready-timeout answers 503 with a JSON detail.
func TestResumeTimeout(t *testing.T) {
	ns := newNamespace(t)
	node := startFakeNode(t, ns)
	be := backend(t, "127.0.0.42", "never")
	node.set("stuck", be.Addr(), true) // resume is never completed
	newSandbox(t, ns, "stuck", sandboxv1beta1.OperatingModeSuspended, be.Port())
	r := startRouter(t, ns, "--ready-timeout=1s")
	got := r.get(t, ns, "stuck", be.Port())
	want := fmt.Sprintf(`{"detail":"Timed out waiting for sandbox %s/stuck to become ready."}`, ns)
	if got.code != 503 || strings.TrimSpace(got.body) != want {
		t.Fatalf("got %+v", got)
	}
	if sb := getSandbox(t, ns, "stuck"); sb.Spec.OperatingMode != sandboxv1beta1.OperatingModeRunning {
		t.Fatal("the resume patch should still have been made")
	}
}

// TestIdleSuspendThenTransparentResume: with --idle-suspend-after, an idle
// sandbox is suspended, and the next request resumes it transparently.
func TestIdleSuspendThenTransparentResume(t *testing.T) {
	ns := newNamespace(t)
	node := startFakeNode(t, ns)
	be := backend(t, "127.0.0.43", "napper")
	node.set("napper", be.Addr(), false)
	newSandbox(t, ns, "napper", sandboxv1beta1.OperatingModeRunning, be.Port())
	r := startRouter(t, ns, "--ready-timeout=20s", "--idle-suspend-after=1s")
	if got := r.get(t, ns, "napper", be.Port()); got.code != 200 {
		t.Fatalf("first request: %+v", got)
	}
	eventually(t, "idle suspension", func() bool {
		return getSandbox(t, ns, "napper").Spec.OperatingMode == sandboxv1beta1.OperatingModeSuspended
	})
	eventually(t, "pod gone", func() bool { return len(getSandbox(t, ns, "napper").Status.PodIPs) == 0 })
	if got := r.get(t, ns, "napper", be.Port(), "X-Sandbox-Pod-IP", be.Addr().String()); got.code != 200 || got.body != "napper" {
		t.Fatalf("request after idle suspension: %+v", got)
	}
	sb := getSandbox(t, ns, "napper")
	if sb.Spec.OperatingMode != sandboxv1beta1.OperatingModeRunning || sb.Annotations["agents.x-k8s.io/last-activity"] == "" {
		t.Fatalf("after resume: mode %q annotations %v", sb.Spec.OperatingMode, sb.Annotations)
	}
}
