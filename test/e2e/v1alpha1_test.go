package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1alpha1 "sigs.k8s.io/agent-sandbox/api/extensions/v1alpha1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/migrate"
	"sigs.k8s.io/agent-sandbox/internal/platform"
	"sigs.k8s.io/agent-sandbox/internal/webhook"
)

// poll checks cond every 100 ms until it holds or timeout passes.
func poll(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestV1alpha1WebhookCertificates: the controller made its CA Secret and
// patched the CA into all four CRDs, which convert through its Service.
func TestV1alpha1WebhookCertificates(t *testing.T) {
	c := ensureController(t)
	s := &corev1.Secret{}
	poll(t, time.Minute, "webhook Secret", func(ctx context.Context) (bool, error) {
		return c.Get(ctx, types.NamespacedName{Namespace: platform.Namespace, Name: webhook.DefaultSecretName}, s) == nil, nil
	})
	for _, name := range webhook.CRDNames {
		poll(t, time.Minute, "caBundle of "+name, func(ctx context.Context) (bool, error) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
				return false, err
			}
			w := crd.Spec.Conversion.Webhook
			return crd.Spec.Conversion.Strategy == apiextensionsv1.WebhookConverter && w != nil && w.ClientConfig.Service != nil &&
				w.ClientConfig.Service.Name == webhook.DefaultServiceName && bytes.Equal(w.ClientConfig.CABundle, s.Data[webhook.KeyCACert]), nil
		})
	}
}

// TestV1alpha1SandboxReadyAndSuspend: a Sandbox written as v1alpha1 gets a
// Pod and reaches Ready; replicas 0 suspends it (Pod deleted), as the
// reference's v1alpha1 API did.
func TestV1alpha1SandboxReadyAndSuspend(t *testing.T) {
	c := ensureController(t)
	name := "e2e-v1alpha1-sandbox"
	beta := webSandbox(name, "gvisor", "echo v1alpha1 > /www/index.html")
	alpha := &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec:       sandboxv1alpha1.SandboxSpec{SandboxBlueprint: beta.Spec.SandboxBlueprint, Replicas: ptr.To(int32(1))},
	}
	if err := c.Create(context.Background(), alpha); err != nil {
		t.Fatalf("creating a v1alpha1 Sandbox: %v", err)
	}
	t.Cleanup(func() { deleteSandbox(t, c, name) })
	sb := waitSandboxReady(t, c, name)
	if sb.Spec.OperatingMode != sandboxv1beta1.OperatingModeRunning {
		t.Fatalf("v1beta1 operatingMode = %q, want Running", sb.Spec.OperatingMode)
	}
	read := &sandboxv1alpha1.Sandbox{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(alpha), read); err != nil {
		t.Fatal(err)
	}
	if read.Status.Replicas != 1 || !meta.IsStatusConditionTrue(read.Status.Conditions, sandboxv1beta1.SandboxConditionReady) {
		t.Fatalf("v1alpha1 status = %+v, want replicas 1 and Ready", read.Status)
	}

	// Suspend through v1alpha1.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))
	if err := c.Patch(context.Background(), &sandboxv1alpha1.Sandbox{ObjectMeta: alpha.ObjectMeta}, patch); err != nil {
		t.Fatalf("setting v1alpha1 replicas 0: %v", err)
	}
	poll(t, time.Minute, "Suspended", func(ctx context.Context) (bool, error) {
		cur := &sandboxv1beta1.Sandbox{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(alpha), cur); err != nil {
			return false, err
		}
		return cur.Spec.OperatingMode == sandboxv1beta1.OperatingModeSuspended &&
			meta.IsStatusConditionTrue(cur.Status.Conditions, sandboxv1beta1.SandboxConditionSuspended), nil
	})
	waitGone(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}})
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(alpha), read); err != nil || read.Status.Replicas != 0 {
		t.Fatalf("v1alpha1 status.replicas = %d (%v), want 0 while suspended", read.Status.Replicas, err)
	}
}

// TestV1alpha1ClaimAdoptsWarm: a v1alpha1 claim naming the default pool in
// warmpool converts to warmPoolRef and is served a warm Sandbox.
func TestV1alpha1ClaimAdoptsWarm(t *testing.T) {
	c := ensureController(t)
	waitPoolReady(t, c, platform.DefaultPool)
	pool := &extv1beta1.SandboxWarmPool{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: platform.DefaultPool}, pool); err != nil {
		t.Fatal(err)
	}
	claim := &extv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, GenerateName: "e2e-v1alpha1-claim-"}}
	claim.Spec.SandboxTemplateRef.Name = pool.Spec.SandboxTemplateRef.Name
	claim.Spec.WarmPool = platform.DefaultPool
	if err := c.Create(context.Background(), claim); err != nil {
		t.Fatalf("creating a v1alpha1 claim: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), claim) })
	var bound string
	poll(t, time.Minute, "claim Ready", func(ctx context.Context) (bool, error) {
		cur := &extv1beta1.SandboxClaim{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(claim), cur); err != nil {
			return false, err
		}
		if cur.Spec.WarmPoolRef.Name != platform.DefaultPool {
			t.Fatalf("warmPoolRef = %q, want %q", cur.Spec.WarmPoolRef.Name, platform.DefaultPool)
		}
		bound = cur.Status.SandboxStatus.Name
		return meta.IsStatusConditionTrue(cur.Status.Conditions, "Ready"), nil
	})
	sb := &sandboxv1beta1.Sandbox{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: bound}, sb); err != nil {
		t.Fatal(err)
	}
	if sb.Labels[labels.LaunchType] != labels.LaunchTypeWarm || !strings.HasPrefix(bound, platform.DefaultPool+"-") {
		t.Fatalf("v1alpha1 claim not served warm: sandbox %s launch-type %q", bound, sb.Labels[labels.LaunchType])
	}
	// Read back as v1alpha1: the policy is the pool it named.
	read := &extv1alpha1.SandboxClaim{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(claim), read); err != nil {
		t.Fatal(err)
	}
	if read.Spec.WarmPool != platform.DefaultPool || read.Spec.SandboxTemplateRef.Name != pool.Spec.SandboxTemplateRef.Name {
		t.Fatalf("v1alpha1 read back: %+v", read.Spec)
	}
}

// TestV1alpha1Migration runs both migration phases on the local cluster in
// a namespace of its own: bootstrap (dry run first) creates the shadow
// pool a cold v1alpha1 claim needs, the claim then starts cold from it, and
// migrate stamps every object.
func TestV1alpha1Migration(t *testing.T) {
	c := ensureController(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-migrate-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	def := &extv1beta1.SandboxTemplate{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: "python-runtime-template"}, def); err != nil {
		t.Fatalf("the default template is missing: %v", err)
	}
	tmpl := &extv1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "upgrade-template-cold"}}
	tmpl.Spec.SandboxBlueprint = *def.Spec.SandboxBlueprint.DeepCopy()
	if err := c.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	claim := &extv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "cold"}}
	claim.Spec.SandboxTemplateRef.Name, claim.Spec.WarmPool = tmpl.Name, extv1alpha1.WarmPoolPolicyNone

	var out bytes.Buffer
	if pools, err := migrate.Bootstrap(ctx, c, migrate.Options{Namespace: ns.Name, DryRun: true, Out: &out}); err != nil || len(pools) != 0 {
		t.Fatalf("bootstrap before any claim: %v %v", pools, err)
	}
	if err := c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if pools, err := migrate.Bootstrap(ctx, c, migrate.Options{Namespace: ns.Name, DryRun: true, Out: &out}); err != nil || len(pools) != 1 {
		t.Fatalf("bootstrap dry run: %v %v\n%s", pools, err, out.String())
	}
	list := &extv1beta1.SandboxWarmPoolList{}
	if err := c.List(ctx, list, client.InNamespace(ns.Name)); err != nil || len(list.Items) != 0 {
		t.Fatalf("dry run created %d pools (%v)", len(list.Items), err)
	}
	for range 2 { // idempotent
		if _, err := migrate.Bootstrap(ctx, c, migrate.Options{Namespace: ns.Name, Out: &out}); err != nil {
			t.Fatalf("bootstrap: %v\n%s", err, out.String())
		}
	}
	// The claim waits for its shadow pool (WarmPoolNotFound) and now
	// starts cold from it: a Sandbox named after the claim.
	poll(t, 3*time.Minute, "cold claim Ready", func(ctx context.Context) (bool, error) {
		cur := &extv1beta1.SandboxClaim{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(claim), cur); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(cur.Status.Conditions, "Ready") && cur.Status.SandboxStatus.Name == claim.Name, nil
	})
	res, err := migrate.Migrate(ctx, c, migrate.Options{Namespace: ns.Name, Out: &out})
	if err != nil || res.Rewritten < 4 { // template, shadow pool, sandbox, claim
		t.Fatalf("migrate: %+v %v\n%s", res, err, out.String())
	}
	cur := &extv1beta1.SandboxClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(claim), cur); err != nil || cur.Annotations[migrate.AnnotationMigratedAt] == "" {
		t.Fatalf("claim not stamped: %v %v", cur.Annotations, err)
	}
	read := &extv1alpha1.SandboxClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(claim), read); err != nil || read.Spec.WarmPool != extv1alpha1.WarmPoolPolicyNone {
		t.Fatalf("claim read as v1alpha1 after migration: %+v %v", read.Spec, err)
	}
}
