package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	controllerSA = "system:serviceaccount:agent-sandbox-system:agent-sandbox-controller"
	agentSA      = "system:serviceaccount:agent-sandbox-system:sandbox-hibernate-agent"
	tenantUser   = "tenant-a"
	annRestore   = "agents.x-k8s.io/restore-snapshot"
	annCkptReq   = "agents.x-k8s.io/checkpoint-requested-at"
	annCkptRes   = "agents.x-k8s.io/checkpoint-result"
	annRestRes   = "agents.x-k8s.io/restore-result"
)

// as returns a client impersonating user (RBAC lets every test user manage
// Pods in ns, so only admission can refuse).
func as(t *testing.T, user string, groups ...string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	c, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func hibPod(ns, name string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
}

// TestHibernationAnnotationsOnlyFromTheirOwners performs the attacks the
// hibernation policy exists for: a tenant's Pod naming another Sandbox's
// snapshot, a tenant asking for a checkpoint, a tenant forging the node
// agent's results; and checks the controller and the agent may do their
// part.
func TestHibernationAnnotationsOnlyFromTheirOwners(t *testing.T) {
	c := ctx(t)
	ns := "hibernation-admission"
	namespace(t, ns, nil)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "pods"},
		Subjects: []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "system:authenticated"}}}
	for _, o := range []client.Object{role, rb} {
		if err := env.Client.Create(c, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"hibernation-policy.yaml", "hibernation-binding.yaml"} {
		o := shipped(t, name)
		if err := env.Client.Create(c, o); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	tenant, controller, agent := as(t, tenantUser), as(t, controllerSA), as(t, agentSA)
	hostAgent := as(t, "local-node-agent", "agents.x-k8s.io:hibernate-agents")

	// Policies load asynchronously: wait until the first attack is refused.
	victimSnapshot := "0b1c2d3e-victim-sandbox-uid"
	err := wait.PollUntilContextTimeout(c, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		err := tenant.Create(ctx, hibPod(ns, "probe", map[string]string{annRestore: victimSnapshot}), client.DryRunAll)
		return err != nil && apierrors.IsForbidden(err) && strings.Contains(err.Error(), "only the agent-sandbox controller"), nil
	})
	if err != nil {
		t.Fatalf("the hibernation policy is not enforced after 20s: %v", err)
	}

	refused := []struct {
		name string
		c    client.Client
		ann  map[string]string
		msg  string
	}{
		{"tenant pod names another sandbox's snapshot", tenant, map[string]string{annRestore: victimSnapshot}, "only the agent-sandbox controller"},
		{"tenant requests a checkpoint", tenant, map[string]string{annCkptReq: "2026-01-01T00:00:00Z"}, "only the agent-sandbox controller"},
		{"tenant forges a checkpoint result", tenant, map[string]string{annCkptRes: `{"ok":true}`}, "only the hibernation node agent"},
		{"tenant forges a restore result", tenant, map[string]string{annRestRes: `{"state":"Restored"}`}, "only the hibernation node agent"},
		{"agent names a snapshot", agent, map[string]string{annRestore: victimSnapshot}, "only the agent-sandbox controller"},
		{"controller forges an agent result", controller, map[string]string{annCkptRes: `{"ok":true}`}, "only the hibernation node agent"},
	}
	for _, tc := range refused {
		err := tc.c.Create(c, hibPod(ns, "attack", tc.ann), client.DryRunAll)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got %v, want Forbidden %q", tc.name, err, tc.msg)
		}
	}

	// The controller creates a restoring Pod; the agent answers on it.
	if err := controller.Create(c, hibPod(ns, "restoring", map[string]string{annRestore: "own-sandbox-uid"})); err != nil {
		t.Fatalf("controller restore pod: %v", err)
	}
	for _, who := range []client.Client{agent, hostAgent} {
		p := &corev1.Pod{}
		if err := who.Get(c, client.ObjectKey{Namespace: ns, Name: "restoring"}, p); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(p.DeepCopy())
		p.Annotations[annRestRes] = `{"state":"Restored"}` + p.ResourceVersion
		if err := who.Patch(c, p, patch); err != nil {
			t.Fatalf("agent restore result: %v", err)
		}
	}
	// A tenant may not move an existing Pod to another snapshot, nor
	// rewrite the agent's answer; it may still edit its own annotations.
	p := &corev1.Pod{}
	if err := tenant.Get(c, client.ObjectKey{Namespace: ns, Name: "restoring"}, p); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{annRestore: victimSnapshot, annRestRes: `{"state":"Fallback"}`} {
		q := p.DeepCopy()
		patch := client.MergeFrom(p.DeepCopy())
		q.Annotations[k] = v
		if err := tenant.Patch(c, q, patch); !apierrors.IsForbidden(err) {
			t.Errorf("tenant update of %s: got %v, want Forbidden", k, err)
		}
	}
	q := p.DeepCopy()
	patch := client.MergeFrom(p.DeepCopy())
	q.Annotations["example.com/note"] = "mine"
	if err := tenant.Patch(c, q, patch); err != nil {
		t.Errorf("tenant's own annotation refused: %v", err)
	}
}
