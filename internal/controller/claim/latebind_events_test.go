package claim

import (
	"context"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// syncRecorder records event reasons synchronously, in call order (the
// real recorder writes asynchronously, which would hide the order).
type syncRecorder struct {
	mu      sync.Mutex
	reasons []string
}

func (r *syncRecorder) Eventf(_ runtime.Object, _ runtime.Object, _, reason, _, _ string, _ ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = append(r.reasons, reason)
}

func (r *syncRecorder) count(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, x := range r.reasons {
		if x == reason {
			n++
		}
	}
	return n
}

// LateBindingUnavailable follows the status write that records it: a pass
// whose write fails emits nothing, the pass that persists the condition
// emits it once, and later passes do not repeat it.
func TestLateBindingUnavailableEventAfterStatusWrite(t *testing.T) {
	signer, err := latebind.GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, Options{LateBinding: LateBinding{Signer: signer}})
	rec := &syncRecorder{}
	f.r.recorder = rec
	tmpl := exttest.NewTemplate(f.ns, "tmpl")
	tmpl.Spec.EnvVarsInjectionPolicy = extv1beta1.EnvVarsInjectionPolicyAllowed
	// The template opts its container out of late binding (it runs no
	// sandboxd), so env claims go cold with a reason.
	tmpl.Spec.PodTemplate.Spec.Containers[0].Env = []corev1.EnvVar{{Name: latebind.KeyEnv, Value: ""}}
	pool := exttest.NewPool(f.ns, "pool", "tmpl", 1)
	f.create(tmpl, pool)
	c := exttest.NewClaim(f.ns, "c1", "pool")
	c.Spec.Env = []extv1beta1.EnvVar{{Name: "API_KEY", Value: "k"}}
	f.create(c)
	f.r.states.observe(client.ObjectKeyFromObject(c), c.UID, f.r.now())

	var mu sync.Mutex
	failWrites := true
	f.funcs.SubResourcePatch = func(ctx context.Context, cl client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
		mu.Lock()
		fail := failWrites
		mu.Unlock()
		if _, isClaim := obj.(*extv1beta1.SandboxClaim); isClaim && fail {
			return apierrors.NewConflict(schema.GroupResource{Resource: "sandboxclaims"}, obj.GetName(), fmt.Errorf("injected"))
		}
		return cl.SubResource(sub).Patch(ctx, obj, p, opts...)
	}
	// A conflict drops the write (the pass is not authoritative).
	_, _ = f.reconcile("c1")
	if cond := meta.FindStatusCondition(f.getClaim("c1").Status.Conditions, extv1beta1.ClaimConditionLateBinding); cond != nil {
		t.Fatalf("the failed write persisted %+v", cond)
	}
	if n := rec.count(extv1beta1.ClaimReasonLateBindingUnavailable); n != 0 {
		t.Fatalf("%d LateBindingUnavailable events before any status write recorded the condition", n)
	}
	mu.Lock()
	failWrites = false
	mu.Unlock()
	eventually(t, func() error {
		if _, err := f.reconcile("c1"); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(f.getClaim("c1").Status.Conditions, extv1beta1.ClaimConditionLateBinding)
		if cond == nil || cond.Reason != extv1beta1.ClaimReasonLateBindingUnavailable {
			return fmt.Errorf("LateBinding condition %+v", cond)
		}
		return nil
	})
	if n := rec.count(extv1beta1.ClaimReasonLateBindingUnavailable); n != 1 {
		t.Fatalf("%d LateBindingUnavailable events once the condition was written, want 1", n)
	}
	f.mustReconcile("c1")
	if n := rec.count(extv1beta1.ClaimReasonLateBindingUnavailable); n != 1 {
		t.Fatalf("%d LateBindingUnavailable events after another pass, want still 1", n)
	}
}
