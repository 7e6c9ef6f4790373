package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// privilegedSandbox asks for a privileged container and the host network.
func privilegedSandbox(ns, name string) *sandboxv1beta1.Sandbox {
	yes := true
	return &sandboxv1beta1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: sandboxv1beta1.SandboxSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
			PodTemplate: sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{
				HostNetwork: true,
				Containers: []corev1.Container{{
					Name: "main", Image: busyboxImage, ImagePullPolicy: corev1.PullNever,
					SecurityContext: &corev1.SecurityContext{Privileged: &yes},
				}},
			}},
		}},
	}
}

// TestAdmissionRefusesPrivilegedSandbox: the install `up` performs carries
// the ValidatingAdmissionPolicy, so on the real cluster a privileged
// Sandbox is refused with the fields named, a namespace labelled exempt
// takes it, and a tenant cannot slip one in through a SandboxTemplate.
func TestAdmissionRefusesPrivilegedSandbox(t *testing.T) {
	c := ensureController(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, o := range []client.Object{
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "agent-sandbox-pod-security"}},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent-sandbox-pod-security"}},
	} {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatalf("%T agent-sandbox-pod-security is not installed: %v", o, err)
		}
	}

	ns := exampleNamespace(t, c, "e2e-admission")
	err := c.Create(ctx, privilegedSandbox(ns, "privileged"))
	if err == nil {
		_ = c.Delete(ctx, privilegedSandbox(ns, "privileged"))
		t.Fatal("the cluster accepted a privileged, host-network Sandbox")
	}
	if !apierrors.IsInvalid(err) {
		t.Errorf("want an Invalid error, got %v", err)
	}
	// The policy reports the first rule a spec breaks: privileged here.
	if field := "spec.podTemplate.spec.containers[0].securityContext.privileged"; !strings.Contains(err.Error(), field) {
		t.Errorf("refusal does not name %s:\n%v", field, err)
	}
	hostNet := privilegedSandbox(ns, "host-network")
	hostNet.Spec.PodTemplate.Spec.Containers[0].SecurityContext = nil
	err = c.Create(ctx, hostNet)
	if err == nil {
		_ = c.Delete(ctx, hostNet)
		t.Fatal("the cluster accepted a host-network Sandbox")
	}
	if field := "spec.podTemplate.spec.hostNetwork"; !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), field) {
		t.Errorf("host-network refusal is not Invalid or does not name %s:\n%v", field, err)
	}

	sb := privilegedSandbox(ns, "via-template")
	tmpl := &extv1beta1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "privileged"},
		Spec:       extv1beta1.SandboxTemplateSpec{SandboxBlueprint: sb.Spec.SandboxBlueprint},
	}
	if err := c.Create(ctx, tmpl); err == nil || !strings.Contains(err.Error(), "securityContext.privileged") {
		t.Errorf("privileged SandboxTemplate: want refusal naming the field, got %v", err)
	}

	// An administrator's exemption: the label on the Namespace. Admission
	// only: the Sandbox is deleted before its pod matters.
	exempt := exampleNamespace(t, c, "e2e-admission-exempt")
	nsObj := &corev1.Namespace{}
	if err := c.Get(ctx, types.NamespacedName{Name: exempt}, nsObj); err != nil {
		t.Fatal(err)
	}
	if nsObj.Labels == nil {
		nsObj.Labels = map[string]string{}
	}
	nsObj.Labels["agents.x-k8s.io/allow-privileged-sandboxes"] = "true"
	if err := c.Update(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	// The policy plugin reads namespace labels from an informer, so the new
	// label may take a moment to count: poll the (dry-run) create.
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = c.Create(ctx, privilegedSandbox(exempt, "privileged"), client.DryRunAll)
		return last == nil, nil
	}); err != nil {
		t.Errorf("exempt namespace refused the privileged Sandbox: %v", last)
	}
}

// TestTemplatePodsHardened: a pool's pods carry the hardened security
// context the template leaves unset, and the python runtime works under it
// (the pool only fills with Ready sandboxes, whose readiness probe is the
// runtime's HTTP server).
func TestTemplatePodsHardened(t *testing.T) {
	c := ensureController(t)
	const pool = "hardened-pool"
	ensurePool(t, c, pool, "gvisor")
	waitPoolReady(t, c, pool)

	var sbs sandboxv1beta1.SandboxList
	if err := c.List(context.Background(), &sbs, client.InNamespace(metav1.NamespaceDefault),
		client.MatchingLabels{labels.WarmPoolSandbox: labels.NameHash(pool)}); err != nil || len(sbs.Items) == 0 {
		t.Fatalf("pool sandboxes: %v (%d)", err, len(sbs.Items))
	}
	pod := &corev1.Pod{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: sbs.Items[0].Name}, pod); err != nil {
		t.Fatal(err)
	}
	if psc := pod.Spec.SecurityContext; psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod %s seccompProfile = %+v, want RuntimeDefault", pod.Name, psc)
	}
	for _, ctr := range pod.Spec.Containers {
		sc := ctr.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container %s securityContext = %+v, want allowPrivilegeEscalation false and drop [ALL]", ctr.Name, sc)
		}
	}
}
