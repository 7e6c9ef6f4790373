package exttest

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// PauseImage is the image of test templates; nothing pulls it on envtest.
const PauseImage = "registry.k8s.io/pause:3.10"

// NewTemplate returns a template with one container named "main".
func NewTemplate(ns, name string) *extv1beta1.SandboxTemplate {
	return &extv1beta1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: extv1beta1.SandboxTemplateSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
			PodTemplate: sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: PauseImage}},
			}},
		}},
	}
}

// NewPool returns a pool of replicas Sandboxes of template tmpl.
func NewPool(ns, name, tmpl string, replicas int32) *extv1beta1.SandboxWarmPool {
	return &extv1beta1.SandboxWarmPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: extv1beta1.SandboxWarmPoolSpec{
			Replicas:           ptr.To(replicas),
			SandboxTemplateRef: extv1beta1.SandboxTemplateRef{Name: tmpl},
		},
	}
}

// NewClaim returns a claim on pool.
func NewClaim(ns, name, pool string) *extv1beta1.SandboxClaim {
	return &extv1beta1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       extv1beta1.SandboxClaimSpec{WarmPoolRef: extv1beta1.WarmPoolRef{Name: pool}},
	}
}

// Create creates objs, failing the test on error.
func Create(t TB, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// TB is the subset of testing.TB the helpers need.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// ClaimReady reports an error unless the claim is Ready=True and names a
// Sandbox.
func ClaimReady(c client.Client, ns, name string) error {
	var claim extv1beta1.SandboxClaim
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &claim); err != nil {
		return err
	}
	if !meta.IsStatusConditionTrue(claim.Status.Conditions, sandboxv1beta1.SandboxConditionReady) || claim.Status.SandboxStatus.Name == "" {
		return fmt.Errorf("claim %s not ready: %+v", name, claim.Status)
	}
	return nil
}

// ClaimReason returns the reason and message of the claim's Ready
// condition.
func ClaimReason(c client.Client, ns, name string) (string, string, error) {
	var claim extv1beta1.SandboxClaim
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &claim); err != nil {
		return "", "", err
	}
	cond := meta.FindStatusCondition(claim.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
	if cond == nil {
		return "", "", fmt.Errorf("claim %s has no Ready condition", name)
	}
	return cond.Reason, cond.Message, nil
}

// PoolMembers lists the Sandboxes labelled as members of pool.
func PoolMembers(c client.Reader, ns, pool string) ([]sandboxv1beta1.Sandbox, error) {
	var list sandboxv1beta1.SandboxList
	if err := c.List(context.Background(), &list, client.InNamespace(ns),
		client.MatchingLabels{labels.WarmPoolSandbox: labels.NameHash(pool)}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// PoolReady reports an error unless pool's status shows want ready
// replicas out of want.
func PoolReady(c client.Client, ns, pool string, want int32) error {
	var p extv1beta1.SandboxWarmPool
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pool}, &p); err != nil {
		return err
	}
	if p.Status.ReadyReplicas != want || p.Status.Replicas != want {
		return fmt.Errorf("pool %s: %d/%d ready, want %d", pool, p.Status.ReadyReplicas, p.Status.Replicas, want)
	}
	return nil
}

// MarkSandboxReady writes a Ready status on a Sandbox, as the Sandbox
// controller would once its Pod is Ready; for tests that run the extension
// controllers without it.
func MarkSandboxReady(ctx context.Context, c client.Client, sb *sandboxv1beta1.Sandbox, ip string) error {
	sb.Status.PodIPs = []string{ip}
	meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{
		Type: sandboxv1beta1.SandboxConditionReady, Status: metav1.ConditionTrue,
		Reason: sandboxv1beta1.ReasonDependenciesReady, Message: "Pod is Ready", ObservedGeneration: sb.Generation,
	})
	return c.Status().Update(ctx, sb)
}
