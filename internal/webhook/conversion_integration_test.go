package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1alpha1 "sigs.k8s.io/agent-sandbox/api/extensions/v1alpha1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

func newNamespace(t *testing.T) string {
	t.Helper()
	testenv.SkipShort(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "conv-"}}
	if err := k8s.Create(testCtx(t), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

func podTemplate() sandboxv1beta1.PodTemplate {
	return sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
}

// TestConversionSandboxThroughAPIServer writes v1alpha1, reads v1beta1 and
// back, through the real apiserver calling the webhook.
func TestConversionSandboxThroughAPIServer(t *testing.T) {
	testenv.SkipShort(t)
	ctx := testCtx(t)
	ns := newNamespace(t)
	alpha := &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sb", Namespace: ns}}
	alpha.Spec.PodTemplate = podTemplate()
	alpha.Spec.Replicas = ptr.To(int32(0))
	if err := k8s.Create(ctx, alpha); err != nil {
		t.Fatalf("creating v1alpha1 Sandbox: %v", err)
	}
	beta := &sandboxv1beta1.Sandbox{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sb"}, beta); err != nil {
		t.Fatalf("reading v1beta1: %v", err)
	}
	if beta.Spec.OperatingMode != sandboxv1beta1.OperatingModeSuspended {
		t.Fatalf("operatingMode = %q, want Suspended for replicas 0", beta.Spec.OperatingMode)
	}
	if len(beta.Spec.PodTemplate.Spec.Containers) != 1 || beta.Spec.PodTemplate.Spec.Containers[0].Image != "busybox" {
		t.Fatalf("pod template lost: %+v", beta.Spec.PodTemplate)
	}
	beta.Spec.OperatingMode = sandboxv1beta1.OperatingModeRunning
	if err := k8s.Update(ctx, beta); err != nil {
		t.Fatalf("resuming through v1beta1: %v", err)
	}
	back := &sandboxv1alpha1.Sandbox{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sb"}, back); err != nil {
		t.Fatalf("reading v1alpha1: %v", err)
	}
	if back.Spec.Replicas == nil || *back.Spec.Replicas != 1 {
		t.Fatalf("v1alpha1 replicas = %v, want 1 after the v1beta1 resume", back.Spec.Replicas)
	}
	list := &sandboxv1alpha1.SandboxList{}
	if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil || len(list.Items) != 1 {
		t.Fatalf("listing v1alpha1: %v (%d items)", err, len(list.Items))
	}
}

// TestConversionClaimThroughAPIServer: "warmpool: none" is stored as the
// shadow pool and read back as none; a specific pool maps to warmPoolRef.
func TestConversionClaimThroughAPIServer(t *testing.T) {
	testenv.SkipShort(t)
	ctx := testCtx(t)
	ns := newNamespace(t)
	for _, tc := range []struct{ name, warmpool, wantRef string }{
		{"cold", "none", "shadow-pool-tmpl"},
		{"any", "default", "shadow-pool-tmpl"},
		{"pinned", "fast-pool", "fast-pool"},
	} {
		alpha := &extv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: ns}}
		alpha.Spec.SandboxTemplateRef.Name = "tmpl"
		alpha.Spec.WarmPool = tc.warmpool
		if err := k8s.Create(ctx, alpha); err != nil {
			t.Fatalf("%s: creating v1alpha1 claim: %v", tc.name, err)
		}
		beta := &extv1beta1.SandboxClaim{}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: tc.name}, beta); err != nil {
			t.Fatalf("%s: reading v1beta1: %v", tc.name, err)
		}
		if beta.Spec.WarmPoolRef.Name != tc.wantRef {
			t.Fatalf("%s: warmPoolRef = %q, want %q", tc.name, beta.Spec.WarmPoolRef.Name, tc.wantRef)
		}
		back := &extv1alpha1.SandboxClaim{}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: tc.name}, back); err != nil {
			t.Fatalf("%s: reading v1alpha1: %v", tc.name, err)
		}
		if back.Spec.WarmPool != tc.warmpool || back.Spec.SandboxTemplateRef.Name != "tmpl" {
			t.Fatalf("%s: read back warmpool %q template %q, want %q tmpl", tc.name, back.Spec.WarmPool, back.Spec.SandboxTemplateRef.Name, tc.warmpool)
		}
		if len(back.Annotations) != 0 {
			t.Fatalf("%s: v1alpha1 annotations = %v, want none", tc.name, back.Annotations)
		}
	}
}

// TestConversionTemplateAndPoolThroughAPIServer: a v1beta1-only field
// survives a v1alpha1 read-modify-write; the pool's replicas map.
func TestConversionTemplateAndPoolThroughAPIServer(t *testing.T) {
	testenv.SkipShort(t)
	ctx := testCtx(t)
	ns := newNamespace(t)
	tmpl := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "tmpl", Namespace: ns}}
	tmpl.Spec.PodTemplate = podTemplate()
	tmpl.Spec.VolumeClaimTemplatesPolicy = extv1beta1.VolumeClaimTemplatesPolicyAllowed
	if err := k8s.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	alpha := &extv1alpha1.SandboxTemplate{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(tmpl), alpha); err != nil {
		t.Fatalf("reading v1alpha1 template: %v", err)
	}
	alpha.Labels = map[string]string{"edited": "v1alpha1"}
	if err := k8s.Update(ctx, alpha); err != nil {
		t.Fatalf("updating v1alpha1 template: %v", err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl); err != nil {
		t.Fatal(err)
	}
	if tmpl.Spec.VolumeClaimTemplatesPolicy != extv1beta1.VolumeClaimTemplatesPolicyAllowed || tmpl.Labels["edited"] != "v1alpha1" {
		t.Fatalf("after v1alpha1 update: policy %q labels %v, want Allowed kept and the edit applied", tmpl.Spec.VolumeClaimTemplatesPolicy, tmpl.Labels)
	}
	if _, ok := tmpl.Annotations[extv1alpha1.VolumeClaimTemplatesPolicyAnnotation]; ok {
		t.Fatalf("policy annotation stored on v1beta1: %v", tmpl.Annotations)
	}

	pool := &extv1alpha1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns}}
	pool.Spec.Replicas = 3
	pool.Spec.SandboxTemplateRef.Name = "tmpl"
	if err := k8s.Create(ctx, pool); err != nil {
		t.Fatalf("creating v1alpha1 pool: %v", err)
	}
	betaPool := &extv1beta1.SandboxWarmPool{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pool), betaPool); err != nil {
		t.Fatal(err)
	}
	if betaPool.DesiredReplicas() != 3 || betaPool.Spec.SandboxTemplateRef.Name != "tmpl" {
		t.Fatalf("v1beta1 pool = %+v", betaPool.Spec)
	}
}

// TestConversionGarbageStateAnnotation performs the attack: a tenant puts an
// unparsable v1alpha1 state annotation on its v1beta1 claim. Listing claims
// as v1alpha1 (one bad object would fail the whole list) must keep working.
func TestConversionGarbageStateAnnotation(t *testing.T) {
	testenv.SkipShort(t)
	ctx := testCtx(t)
	ns := newNamespace(t)
	for i, ann := range []map[string]string{
		{extv1alpha1.SandboxClaimStateAnnotation: "{{not json"},
		nil,
	} {
		c := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: []string{"evil", "fine"}[i], Namespace: ns, Annotations: ann}}
		c.Spec.WarmPoolRef.Name = "shadow-pool-tmpl"
		if err := k8s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	list := &extv1alpha1.SandboxClaimList{}
	if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatalf("v1alpha1 list broken by one annotation: %v", err)
	}
	if len(list.Items) != 2 {
		t.Fatalf("listed %d claims, want 2", len(list.Items))
	}
	for _, c := range list.Items {
		if c.Spec.SandboxTemplateRef.Name != "tmpl" || c.Spec.WarmPool != "default" {
			t.Fatalf("claim %s: %+v", c.Name, c.Spec)
		}
	}
}

// TestV1beta1WorksWithoutWebhook: with the webhook unreachable (the
// controller runs with --enable-webhook=false), v1beta1 clients keep
// working; only v1alpha1 requests fail, with the apiserver's error.
func TestV1beta1WorksWithoutWebhook(t *testing.T) {
	testenv.SkipShort(t)
	ctx := testCtx(t)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "sandboxes.agents.x-k8s.io"}, crd); err != nil {
		t.Fatal(err)
	}
	orig := crd.DeepCopy()
	crd.Spec.Conversion.Webhook.ClientConfig.URL = ptr.To("https://127.0.0.1:1/convert")
	if err := k8s.Update(ctx, crd); err != nil {
		t.Fatalf("pointing the webhook nowhere: %v", err)
	}
	t.Cleanup(func() {
		cur := &apiextensionsv1.CustomResourceDefinition{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: orig.Name}, cur); err != nil {
			t.Errorf("restoring CRD: %v", err)
			return
		}
		cur.Spec.Conversion = orig.Spec.Conversion
		if err := k8s.Update(ctx, cur); err != nil {
			t.Errorf("restoring CRD: %v", err)
		}
	})
	ns := newNamespace(t)
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns}}
	sb.Spec.PodTemplate = podTemplate()
	// The CRD update reaches the apiserver's handler asynchronously; poll
	// until a v1alpha1 read observably fails, then check v1beta1.
	if err := k8s.Create(ctx, sb); err != nil {
		t.Fatalf("v1beta1 create without webhook: %v", err)
	}
	var alphaErr error
	_ = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		alphaErr = k8s.Get(ctx, client.ObjectKeyFromObject(sb), &sandboxv1alpha1.Sandbox{})
		return alphaErr != nil, nil
	})
	if alphaErr == nil || !strings.Contains(alphaErr.Error(), "conversion webhook") {
		t.Fatalf("v1alpha1 get error = %v, want the apiserver's conversion webhook error", alphaErr)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(sb), &sandboxv1beta1.Sandbox{}); err != nil {
		t.Fatalf("v1beta1 get without webhook: %v", err)
	}
	if err := k8s.List(ctx, &sandboxv1beta1.SandboxList{}, client.InNamespace(ns)); err != nil {
		t.Fatalf("v1beta1 list without webhook: %v", err)
	}
}
