package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/platform"
)

// routerURL finds the router pod and returns its base URL. The local
// cluster has no kube-proxy; pod IPs are reachable from the node.
func routerURL(t *testing.T, c client.Client) string {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(context.Background(), &pods, client.InNamespace(platform.Namespace), client.MatchingLabels{"app": "sandbox-router"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			return "http://" + p.Status.PodIP + ":8080"
		}
	}
	t.Fatalf("no running router pod in %s", platform.Namespace)
	return ""
}

// execute runs a command in a sandbox through the router with the legacy
// runtime API the SDKs speak.
func execute(t *testing.T, router, namespace, sandbox, command string) (stdout string, exitCode int) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"command": command})
	req, err := http.NewRequest(http.MethodPost, router+"/execute", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Sandbox-ID", sandbox)
	req.Header.Set("X-Sandbox-Namespace", namespace)
	req.Header.Set("X-Sandbox-Port", "8888")
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("execute through the router: %v", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("execute through the router: %s: %s", resp.Status, data)
	}
	var out struct {
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
		ExitCode int    `json:"exit_code"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("decoding %q: %v", data, err)
	}
	if out.ExitCode != 0 {
		t.Logf("stderr: %s", out.Stderr)
	}
	return out.Stdout, out.ExitCode
}

// ensurePool creates a python-runtime template and pool on runtimeClass,
// unless they exist (the gVisor one is the platform default).
func ensurePool(t *testing.T, c client.Client, pool, runtimeClass string) {
	t.Helper()
	existing := &extv1beta1.SandboxWarmPool{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: pool}, existing); err == nil {
		return
	}
	tmpl := &extv1beta1.SandboxTemplate{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: "python-runtime-template"}, tmpl); err != nil {
		t.Fatalf("the default template is missing: %v", err)
	}
	mine := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: pool + "-template"}, Spec: *tmpl.Spec.DeepCopy()}
	mine.Spec.PodTemplate.Spec.RuntimeClassName = &runtimeClass
	if err := c.Create(context.Background(), mine); err != nil {
		t.Fatal(err)
	}
	replicas := int32(1)
	p := &extv1beta1.SandboxWarmPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: pool},
		Spec:       extv1beta1.SandboxWarmPoolSpec{Replicas: &replicas, SandboxTemplateRef: extv1beta1.SandboxTemplateRef{Name: mine.Name}},
	}
	if err := c.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), p)
		_ = c.Delete(context.Background(), mine)
	})
}

func waitPoolReady(t *testing.T, c client.Client, pool string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		p := &extv1beta1.SandboxWarmPool{}
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: pool}, p); err == nil &&
			p.Status.ReadyReplicas >= p.DesiredReplicas() && p.DesiredReplicas() > 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("pool %s never filled", pool)
}

// A claim adopts a warm sandbox (never a cold one while the pool holds a
// ready sandbox), the pool refills, and a command runs in the adopted
// sandbox through the router, under the pool's RuntimeClass.
func TestClaimFromWarmPoolRunsThroughRouter(t *testing.T) {
	c := ensureController(t)
	router := routerURL(t, c)
	for _, tc := range []struct{ pool, runtimeClass string }{
		{platform.DefaultPool, "gvisor"},
		{"python-runc-pool", "runc"},
	} {
		t.Run(tc.runtimeClass, func(t *testing.T) {
			ensurePool(t, c, tc.pool, tc.runtimeClass)
			claimAndRunPython(t, c, router, tc.pool, tc.runtimeClass)
			waitPoolReady(t, c, tc.pool) // refilled
		})
	}
}

// claimAndRunPython claims a sandbox from pool, checks it was served warm
// and is controlled by the claim, and runs python3 in it through the router
// under runtimeClass (gVisor shows in the kernel version). The claim is
// deleted when the function returns.
func claimAndRunPython(t *testing.T, c client.Client, router, pool, runtimeClass string) {
	t.Helper()
	waitPoolReady(t, c, pool)
	claim := &extv1beta1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, GenerateName: "e2e-claim-"},
		Spec:       extv1beta1.SandboxClaimSpec{WarmPoolRef: extv1beta1.WarmPoolRef{Name: pool}},
	}
	start := time.Now()
	if err := c.Create(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Delete(context.Background(), claim) }()
	var sandboxName string
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		cur := &extv1beta1.SandboxClaim{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(claim), cur); err == nil &&
			meta.IsStatusConditionTrue(cur.Status.Conditions, "Ready") {
			sandboxName = cur.Status.SandboxStatus.Name
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if sandboxName == "" {
		t.Fatalf("claim never became Ready")
	}
	t.Logf("claim Ready after %s (observed by polling every 20 ms)", time.Since(start).Round(time.Millisecond))
	sb := &sandboxv1beta1.Sandbox{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: sandboxName}, sb); err != nil {
		t.Fatal(err)
	}
	if sb.Labels[labels.LaunchType] != labels.LaunchTypeWarm || !strings.HasPrefix(sandboxName, pool+"-") {
		t.Errorf("claim was not served warm: sandbox %s launch-type %q", sandboxName, sb.Labels[labels.LaunchType])
	}
	if ref := metav1.GetControllerOf(sb); ref == nil || ref.Kind != "SandboxClaim" || ref.UID != claim.UID {
		t.Errorf("adopted sandbox is not controlled by the claim: %+v", sb.OwnerReferences)
	}
	out, code := execute(t, router, metav1.NamespaceDefault, sandboxName,
		`python3 -c "import platform; print('python', platform.python_version(), open('/proc/version').read().strip())"`)
	if code != 0 || !strings.HasPrefix(out, "python 3") {
		t.Fatalf("python through the router: exit %d, %q", code, out)
	}
	gvisor := strings.Contains(out, "gvisor") || strings.Contains(out, "gVisor")
	if (runtimeClass == "gvisor") != gvisor {
		t.Errorf("runtime %s reports kernel %q", runtimeClass, out)
	}
}
