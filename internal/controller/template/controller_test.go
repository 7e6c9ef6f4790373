package template

import (
	"context"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/blueprint"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// The reconciler runs against the real apiserver with an uncached client,
// one pass at a time, so each test reads as "given, reconcile, then".
func reconcileTemplate(t *testing.T, tmpl *extv1beta1.SandboxTemplate) error {
	t.Helper()
	r := NewReconciler(env.Client, nil, Options{})
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tmpl)})
	return err
}

func getPolicy(t *testing.T, ns, tmpl string) (*networkingv1.NetworkPolicy, error) {
	t.Helper()
	var np networkingv1.NetworkPolicy
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: blueprint.NetworkPolicyName(tmpl)}, &np)
	return &np, err
}

func update(t *testing.T, tmpl *extv1beta1.SandboxTemplate, edit func(*extv1beta1.SandboxTemplate)) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl); err != nil {
		t.Fatal(err)
	}
	edit(tmpl)
	if err := env.Client.Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
}

func TestSecureDefaultPolicyCreatedAndTemplateLabelled(t *testing.T) {
	testenv.SkipShort(t)
	ns := exttest.Namespace(t, env.Client, "tmpl")
	tmpl := exttest.NewTemplate(ns, "python")
	exttest.Create(t, env.Client, tmpl)
	if err := reconcileTemplate(t, tmpl); err != nil {
		t.Fatal(err)
	}
	np, err := getPolicy(t, ns, "python")
	if err != nil {
		t.Fatalf("policy not created: %v", err)
	}
	want := blueprint.NetworkPolicySpec(tmpl)
	if len(np.Spec.Egress) != 1 || len(np.Spec.Ingress) != 1 || np.Spec.PodSelector.MatchLabels[labels.SandboxTemplateRefHash] != labels.NameHash("python") {
		t.Fatalf("policy spec %+v, want %+v", np.Spec, want)
	}
	if !metav1.IsControlledBy(np, tmpl) {
		t.Error("policy is not controlled by the template")
	}
	var got extv1beta1.SandboxTemplate
	_ = env.Client.Get(context.Background(), client.ObjectKeyFromObject(tmpl), &got)
	if got.Labels[labels.SandboxTemplateRefHash] != labels.NameHash("python") {
		t.Errorf("template labels = %v", got.Labels)
	}
	// A second pass writes nothing and changes nothing.
	rv := np.ResourceVersion
	if err := reconcileTemplate(t, tmpl); err != nil {
		t.Fatal(err)
	}
	np2, _ := getPolicy(t, ns, "python")
	if np2.ResourceVersion != rv {
		t.Error("steady-state pass rewrote the policy")
	}
}

func TestCustomPolicyCreatedAndUpdated(t *testing.T) {
	testenv.SkipShort(t)
	ns := exttest.Namespace(t, env.Client, "tmpl")
	tmpl := exttest.NewTemplate(ns, "custom")
	port := intstr.FromInt32(80)
	tmpl.Spec.NetworkPolicy = &extv1beta1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}}}
	exttest.Create(t, env.Client, tmpl)
	if err := reconcileTemplate(t, tmpl); err != nil {
		t.Fatal(err)
	}
	np, err := getPolicy(t, ns, "custom")
	if err != nil || len(np.Spec.Ingress) != 1 || np.Spec.Ingress[0].Ports[0].Port.IntVal != 80 || len(np.Spec.Egress) != 0 {
		t.Fatalf("custom policy = %+v, %v", np, err)
	}
	update(t, tmpl, func(tm *extv1beta1.SandboxTemplate) {
		p := intstr.FromInt32(8080)
		tm.Spec.NetworkPolicy.Ingress[0].Ports[0].Port = &p
	})
	if err := reconcileTemplate(t, tmpl); err != nil {
		t.Fatal(err)
	}
	np, _ = getPolicy(t, ns, "custom")
	if np.Spec.Ingress[0].Ports[0].Port.IntVal != 8080 {
		t.Fatalf("owned policy not updated: %+v", np.Spec.Ingress)
	}
}

func TestUnmanagedCreatesNoneAndDeletesOwned(t *testing.T) {
	testenv.SkipShort(t)
	ns := exttest.Namespace(t, env.Client, "tmpl")
	tmpl := exttest.NewTemplate(ns, "t")
	exttest.Create(t, env.Client, tmpl)
	if err := reconcileTemplate(t, tmpl); err != nil {
		t.Fatal(err)
	}
	if _, err := getPolicy(t, ns, "t"); err != nil {
		t.Fatal(err)
	}
	update(t, tmpl, func(tm *extv1beta1.SandboxTemplate) {
		tm.Spec.NetworkPolicyManagement = extv1beta1.NetworkPolicyManagementUnmanaged
	})
	if err := reconcileTemplate(t, tmpl); err != nil {
		t.Fatal(err)
	}
	if _, err := getPolicy(t, ns, "t"); !apierrors.IsNotFound(err) {
		t.Fatalf("owned policy not deleted on switch to Unmanaged: %v", err)
	}

	unmanaged := exttest.NewTemplate(ns, "u")
	unmanaged.Spec.NetworkPolicyManagement = extv1beta1.NetworkPolicyManagementUnmanaged
	exttest.Create(t, env.Client, unmanaged)
	if err := reconcileTemplate(t, unmanaged); err != nil {
		t.Fatal(err)
	}
	if _, err := getPolicy(t, ns, "u"); !apierrors.IsNotFound(err) {
		t.Fatalf("unmanaged template got a policy: %v", err)
	}
}

// A tenant-made policy with the template's policy name must never be
// rewritten or deleted by the controller (it could open traffic).
func TestForeignPolicyIsNeverTouched(t *testing.T) {
	testenv.SkipShort(t)
	ns := exttest.Namespace(t, env.Client, "tmpl")
	foreign := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: blueprint.NetworkPolicyName("t")},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	exttest.Create(t, env.Client, foreign)
	tmpl := exttest.NewTemplate(ns, "t")
	exttest.Create(t, env.Client, tmpl)

	err := reconcileTemplate(t, tmpl)
	if err == nil || !strings.Contains(err.Error(), `refusing to update NetworkPolicy "t-network-policy" as it is not controlled by SandboxTemplate "t"`) {
		t.Fatalf("err = %v", err)
	}
	np, _ := getPolicy(t, ns, "t")
	if np.ResourceVersion != foreign.ResourceVersion {
		t.Fatal("foreign policy was modified")
	}

	update(t, tmpl, func(tm *extv1beta1.SandboxTemplate) {
		tm.Spec.NetworkPolicyManagement = extv1beta1.NetworkPolicyManagementUnmanaged
	})
	if err := reconcileTemplate(t, tmpl); err != nil {
		t.Fatal(err)
	}
	if _, err := getPolicy(t, ns, "t"); err != nil {
		t.Fatalf("foreign policy deleted under Unmanaged: %v", err)
	}
}
