package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
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
	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// lateBindingPool makes a namespace with a copy of the default Python
// template that allows claim env (nothing else: no key, the controller's
// pool injects it) and a warm pool of replicas, and waits for it to fill.
func lateBindingPool(t *testing.T, c client.Client, replicas int32) (string, string) {
	t.Helper()
	ctx := context.Background()
	tmpl := &extv1beta1.SandboxTemplate{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: "python-runtime-template"}, tmpl); err != nil {
		t.Fatalf("the default template is missing: %v", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-latebind-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	mine := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "env-template"}, Spec: *tmpl.Spec.DeepCopy()}
	mine.Spec.EnvVarsInjectionPolicy = extv1beta1.EnvVarsInjectionPolicyAllowed
	pool := &extv1beta1.SandboxWarmPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "env-pool"},
		Spec:       extv1beta1.SandboxWarmPoolSpec{Replicas: &replicas, SandboxTemplateRef: extv1beta1.SandboxTemplateRef{Name: mine.Name}},
	}
	for _, o := range []client.Object{mine, pool} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		p := &extv1beta1.SandboxWarmPool{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pool), p); err == nil && p.Status.ReadyReplicas == replicas {
			return ns.Name, pool.Name
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s/%s never filled", ns.Name, pool.Name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Late binding out of the box on real gVisor pods: a claim with env made
// through the Python SDK (create_sandbox(warmpool, env=...)) from a pool of
// a template that only allows env is served by a Sandbox that was already a
// Ready pool member, and printenv in it shows the claim's values.
func TestLateBindingPythonSDKOnGVisor(t *testing.T) {
	c := ensureController(t)
	router := routerURL(t, c)
	py := pythonSDK(t)
	ns, pool := lateBindingPool(t, c, 2)
	var before sandboxv1beta1.SandboxList
	if err := c.List(context.Background(), &before, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	members := map[types.UID]bool{}
	for i := range before.Items {
		sb := &before.Items[i]
		members[sb.UID] = true
		keys := 0
		for _, e := range sb.Spec.PodTemplate.Spec.Containers[0].Env {
			if e.Name == latebind.KeyEnv && strings.HasPrefix(e.Value, "ed25519:") {
				keys++
			}
		}
		if keys != 1 {
			t.Fatalf("pool member %s carries %d delivery keys; is the controller running with late binding (--manage-late-binding-key)?", sb.Name, keys)
		}
	}
	want := map[string]string{"API_TOKEN": "tok-e2e-123", "GREETING": "hello late binding", "MODE": "warm"}
	envJSON, _ := json.Marshal(want)
	out := runPython(t, py, filepath.Join(repoRoot(), "test", "e2e", "testdata", "py_latebind.py"),
		"NAMESPACE="+ns, "WARMPOOL="+pool, "ROUTER_URL="+router, "CLAIM_ENV="+string(envJSON))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var res struct {
		Claim, Sandbox string
		Printenv       map[string]string
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("py_latebind.py printed no result line: %v\n%s", err, out)
	}
	for name, v := range want {
		if got := res.Printenv[name]; got != v+"\n" {
			t.Errorf("printenv %s = %q, want %q", name, got, v)
		}
	}
	var sb sandboxv1beta1.Sandbox
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: res.Sandbox}, &sb); err != nil {
		t.Fatal(err)
	}
	if !members[sb.UID] || sb.Name == res.Claim || sb.Labels[labels.LaunchType] != labels.LaunchTypeWarm {
		t.Fatalf("claim %s got sandbox %s (launch type %q), want one of the pool's Ready members", res.Claim, sb.Name, sb.Labels[labels.LaunchType])
	}
	var claim extv1beta1.SandboxClaim
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: res.Claim}, &claim); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(claim.Status.Conditions, extv1beta1.ClaimConditionLateBinding); cond == nil || cond.Reason != extv1beta1.ClaimReasonEnvApplied {
		t.Errorf("LateBinding condition = %+v, want EnvApplied", cond)
	}
	// The values live in the claim only: not in the Sandbox, not in the Pod.
	var pod corev1.Pod
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: sb.Name}, &pod); err != nil {
		t.Fatal(err)
	}
	for what, obj := range map[string]any{"sandbox": sb.Spec, "pod": pod.Spec} {
		if b, _ := json.Marshal(obj); strings.Contains(string(b), "tok-e2e-123") {
			t.Errorf("the %s spec carries the env value", what)
		}
	}
}
