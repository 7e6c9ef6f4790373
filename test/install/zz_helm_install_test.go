package install

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestHelmInstall installs the chart into the test apiserver with `helm
// install` (CRDs from crds/ included), checks what landed, then uninstalls.
// It runs last (file order): the objects it creates would otherwise be
// shared with the dry runs above. Pods never start here: the test apiserver
// has no node.
func TestHelmInstall(t *testing.T) {
	ensureNamespace(t)
	chart := repo("charts", "agent-sandbox")
	kc := "--kubeconfig=" + env.Kubeconfig

	// Bad values fail helm install the same way, before any object is sent.
	if _, err := helm(t, "install", "bad", chart, kc, "-n", Namespace, "--set", "replicaCount=one"); err == nil ||
		!strings.Contains(err.Error(), "/replicaCount") {
		t.Fatalf("helm install with replicaCount=one: %v", err)
	}

	out, err := helm(t, "install", "agent-sandbox", chart, kc, "-n", Namespace, "--set", "replicaCount=2", "--set", "image.repository=localhost/agent-sandbox/controller", "--set", "image.tag=dev")
	if err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := helm(t, "uninstall", "agent-sandbox", kc, "-n", Namespace, "--wait", "--timeout=60s"); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})
	if !strings.Contains(out, "STATUS: deployed") || !strings.Contains(out, "kubectl -n agent-sandbox-system rollout status deploy/agent-sandbox-controller") {
		t.Errorf("helm install output:\n%s", out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var d appsv1.Deployment
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "agent-sandbox-controller"}, &d); err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].Image != "localhost/agent-sandbox/controller:dev" {
		t.Errorf("controller Deployment: %d replicas of %s", *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Image)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "sandbox-router"}, &d); err != nil {
		t.Fatal(err)
	}
	var crb rbacv1.ClusterRoleBinding
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "agent-sandbox-controller-extensions"}, &crb); err != nil {
		t.Fatal(err)
	}
	if got := kubectl(t, "auth", "can-i", "create", "sandboxes.agents.x-k8s.io",
		"--as=system:serviceaccount:agent-sandbox-system:agent-sandbox-controller", "-n", "default"); strings.TrimSpace(got) != "yes" {
		t.Errorf("controller may not create sandboxes: %s", got)
	}
	if got := kubectl(t, "auth", "can-i", "patch", "sandboxes.agents.x-k8s.io",
		"--as=system:serviceaccount:agent-sandbox-system:sandbox-router", "-n", "default"); strings.TrimSpace(got) != "yes" {
		t.Errorf("router may not patch sandboxes: %s", got)
	}
	// Least privilege: neither may read Secrets.
	for _, sa := range []string{"agent-sandbox-controller", "sandbox-router"} {
		out, _ := command(ctx, nil, kubectlBin(t), "--kubeconfig", env.Kubeconfig, "auth", "can-i", "get", "secrets",
			"--as=system:serviceaccount:agent-sandbox-system:"+sa, "-n", "default")
		if strings.TrimSpace(out) != "no" {
			t.Errorf("%s may read secrets: %q", sa, out)
		}
	}
}
