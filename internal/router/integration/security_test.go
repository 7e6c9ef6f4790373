package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	sblabels "sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/router"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// TestForeignPodCannotHijackRoute (issue 16 finding 2): a Pending pod in
// namespace B whose controller reference carries namespace A's Sandbox UID
// and the name-hash label used to make every router answer 503 for A's
// sandbox. Also a pod in A's namespace whose reference names the Sandbox
// with a version the CRD does not serve does not count.
func TestForeignPodCannotHijackRoute(t *testing.T) {
	testenv.SkipShort(t)
	nsA, nsB := newNamespace(t), newNamespace(t)
	node := startFakeNode(t, nsA)
	be := backend(t, "127.0.0.51", "victim")
	node.set("victim", be.Addr(), false)
	sb := newSandbox(t, nsA, "victim", sandboxv1beta1.OperatingModeRunning, be.Port())
	r := startRouter(t, "", "--ready-timeout=2s")
	eventually(t, "victim routable", func() bool { return r.get(t, nsA, "victim", be.Port()).code == 200 })

	forged := func(ns, name, apiVersion string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{sblabels.SandboxNameHash: sblabels.NameHash("victim")},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: apiVersion, Kind: "Sandbox", Name: "victim",
				UID: sb.UID, Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	}
	for _, p := range []*corev1.Pod{
		forged(nsB, "hijack", sandboxv1beta1.GroupVersion.String()),
		forged(nsB, "hijack-other-version", "agents.x-k8s.io/v1alpha1"),
		forged(nsA, "bogus-version", "agents.x-k8s.io/v9"),
	} {
		if err := env.Client.Create(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	// A marker sandbox whose pod is created after the forged ones: once the
	// router routes it, its pod watch has delivered the forged pods too.
	mbe := backend(t, "127.0.0.52", "marker")
	node.set("marker", mbe.Addr(), false)
	newSandbox(t, nsA, "marker", sandboxv1beta1.OperatingModeRunning, mbe.Port())
	eventually(t, "marker routable", func() bool { return r.get(t, nsA, "marker", mbe.Port()).code == 200 })
	for range 5 {
		if got := r.get(t, nsA, "victim", be.Port()); got.code != 200 || got.body != "victim" {
			t.Fatalf("victim with forged pods around: %+v", got)
		}
	}
}

func clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// saToken returns a bound token of the default ServiceAccount of ns.
func saToken(t *testing.T, ns string) string {
	t.Helper()
	tr, err := clientset(t).CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), "default",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", ns, err)
	}
	return tr.Status.Token
}

// grant binds ns's default ServiceAccount, in namespace target, to a Role
// with the given verbs on sandboxes.
func grant(t *testing.T, target, saNS string, verbs ...string) {
	t.Helper()
	ctx := context.Background()
	name := "sandbox-" + strings.Join(verbs, "-") + "-" + saNS
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: target},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"agents.x-k8s.io"}, Resources: []string{"sandboxes"}, Verbs: verbs}}}
	if err := env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: target},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: saNS}}}
	if err := env.Client.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}
}

// TestTokenReviewAuthorizesPerNamespace (issue 16 finding 3): in
// tokenreview mode a ServiceAccount token of namespace B no longer reaches
// a sandbox of namespace A: the caller needs verb connect on sandboxes
// there (SubjectAccessReview). Refused and anonymous requests do not resume
// a suspended sandbox; the first authorized one does.
func TestTokenReviewAuthorizesPerNamespace(t *testing.T) {
	nsA, nsB := newNamespace(t), newNamespace(t)
	node := startFakeNode(t, nsA)
	be := backend(t, "127.0.0.53", "alpha")
	sleepy := backend(t, "127.0.0.54", "sleepy")
	node.set("alpha", be.Addr(), false)
	node.set("sleepy", sleepy.Addr(), false)
	newSandbox(t, nsA, "alpha", sandboxv1beta1.OperatingModeRunning, be.Port())
	newSandbox(t, nsA, "sleepy", sandboxv1beta1.OperatingModeSuspended, sleepy.Port())
	eventually(t, "suspended status", func() bool { return len(getSandbox(t, nsA, "sleepy").Status.Conditions) > 0 })
	r := startRouter(t, nsA, "--authz-mode=tokenreview", "--ready-timeout=20s",
		"--authz-access-review-negative-ttl=200ms")
	tokA, tokB := saToken(t, nsA), saToken(t, nsB)
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

	if got := r.get(t, nsA, "alpha", be.Port(), bearer(tokB)...); got.code != 403 {
		t.Fatalf("namespace B's token on A's sandbox: %+v", got)
	}
	if got := r.get(t, nsA, "alpha", be.Port(), bearer(tokA)...); got.code != 403 {
		t.Fatalf("token without RBAC: %+v", got)
	}
	if got := r.get(t, nsA, "alpha", be.Port(), "Authorization", "Bearer not-a-token"); got.code != 401 {
		t.Fatalf("bad token: %+v", got)
	}
	// get is what viewers have; it is not enough.
	grant(t, nsA, nsB, "get", "list", "watch")
	// Refused and anonymous requests must not wake the suspended sandbox.
	if got := r.get(t, nsA, "sleepy", sleepy.Port(), bearer(tokB)...); got.code != 403 {
		t.Fatalf("viewer on suspended sandbox: %+v", got)
	}
	if got := r.get(t, nsA, "sleepy", sleepy.Port()); got.code != 401 {
		t.Fatalf("anonymous on suspended sandbox: %+v", got)
	}
	if mode := getSandbox(t, nsA, "sleepy").Spec.OperatingMode; mode != sandboxv1beta1.OperatingModeSuspended {
		t.Fatalf("an unauthorized request resumed the sandbox (mode %q)", mode)
	}
	if got := r.metric(t, fmt.Sprintf(`sandbox_router_resumes_total{outcome="success",sandbox_namespace="%s"}`, nsA)); got != "" {
		t.Fatalf("resume metric after refused requests: %q", got)
	}
	grant(t, nsA, nsA, "connect")
	eventually(t, "RBAC grant to take effect", func() bool {
		return r.get(t, nsA, "alpha", be.Port(), bearer(tokA)...).code == 200
	})
	if got := r.get(t, nsA, "sleepy", sleepy.Port(), bearer(tokA)...); got.code != 200 || got.body != "sleepy" {
		t.Fatalf("authorized request to the suspended sandbox: %+v", got)
	}
	if got := r.get(t, nsA, "alpha", be.Port(), bearer(tokB)...); got.code != 403 {
		t.Fatalf("B still refused after A's grant: %+v", got)
	}
}

// noRightsKubeconfig writes a kubeconfig that impersonates a user without
// any RBAC binding (it only has what system:authenticated has).
func noRightsKubeconfig(t *testing.T) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = "router-without-rights"
	}
	f, err := os.CreateTemp(t.TempDir(), "kubeconfig-*")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := clientcmd.WriteToFile(*kc, f.Name()); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// TestReducedModeWithoutRights (issue 18): a router whose identity may not
// list or watch sandboxes and pods (the reference's router manifest) serves
// at once in the reduced mode: X-Sandbox-Pod-IP routing with the
// address-class checks, and says so on /healthz, /readyz and a metric.
// With --require-cache it exits instead.
func TestReducedModeWithoutRights(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	be := backend(t, "127.0.0.55", "direct")
	kc := noRightsKubeconfig(t)
	start := time.Now()
	r := startRouter(t, ns, "--kubeconfig="+kc)
	if took := time.Since(start); took > 20*time.Second {
		t.Logf("reduced-mode startup took %s", took) // informational: the bound is startRouter's
	}
	if got := r.get(t, ns, "anything", be.Port(), "X-Sandbox-Pod-IP", be.Addr().String()); got.code != 200 || got.body != "direct" {
		t.Fatalf("pod-IP routing in the reduced mode: %+v", got)
	}
	for _, ip := range []string{"169.254.169.254", "0.0.0.0", "224.0.0.1"} {
		if got := r.get(t, ns, "anything", be.Port(), "X-Sandbox-Pod-IP", ip); got.code != 400 {
			t.Fatalf("forbidden class %s: %+v", ip, got)
		}
	}
	// No hint: the DNS form, which does not resolve here: 502, not 503.
	if got := r.get(t, ns, "nosuch", be.Port()); got.code != 502 {
		t.Fatalf("DNS form: %+v", got)
	}
	if got := r.metric(t, "sandbox_router_cache_verification"); got != "0" {
		t.Fatalf("cache verification gauge %q", got)
	}
	resp, err := http.Get("http://" + r.proxy + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, resp)
	if resp.StatusCode != 200 || !strings.Contains(body, `"status":"degraded"`) || !strings.Contains(body, "list agents.x-k8s.io/sandboxes") {
		t.Fatalf("/healthz in the reduced mode: %d %s", resp.StatusCode, body)
	}

	// --require-cache: missing rights are fatal, promptly.
	cfg, err := router.ParseConfig([]string{"--http-bind-address=" + freeAddr(t), "--metrics-bind-address=",
		"--health-probe-bind-address=", "--kubeconfig=" + kc, "--require-cache"}, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	err = router.Run(ctx, cfg, logr.Discard(), router.BuildInfo{})
	if err == nil || !strings.Contains(err.Error(), "missing RBAC rights") || ctx.Err() != nil {
		t.Fatalf("--require-cache without rights: %v", err)
	}
}

// TestReducedModeByFlag: --cache-enabled=false selects the reduced mode
// even with full rights; with them, the full mode's /healthz is the
// reference's {"status":"ok"}.
func TestReducedModeByFlag(t *testing.T) {
	ns := newNamespace(t)
	be := backend(t, "127.0.0.56", "direct")
	r := startRouter(t, ns, "--cache-enabled=false")
	if got := r.get(t, ns, "anything", be.Port(), "X-Sandbox-Pod-IP", be.Addr().String()); got.code != 200 {
		t.Fatalf("pod-IP routing: %+v", got)
	}
	full := startRouter(t, ns)
	for _, c := range []struct {
		r    *runningRouter
		want string
	}{{r, `"status":"degraded"`}, {full, `{"status":"ok"}`}} {
		resp, err := http.Get("http://" + c.r.proxy + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		if body := readBody(t, resp); !strings.Contains(body, c.want) {
			t.Fatalf("/healthz %q, want %s", body, c.want)
		}
	}
	if got := full.get(t, ns, "anything", be.Port(), "X-Sandbox-Pod-IP", be.Addr().String()); got.code != 404 {
		t.Fatalf("full mode must not route an unknown sandbox by hint: %+v", got)
	}
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
