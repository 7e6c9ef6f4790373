package claim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

func lifecycle(policy extv1beta1.ClaimShutdownPolicy, shutdownIn time.Duration, ttl *int32) func(*extv1beta1.SandboxClaim) {
	return func(c *extv1beta1.SandboxClaim) {
		c.Spec.Lifecycle = &extv1beta1.Lifecycle{ShutdownPolicy: policy, TTLSecondsAfterFinished: ttl}
		if shutdownIn != 0 {
			t := metav1.NewTime(time.Now().Add(shutdownIn))
			c.Spec.Lifecycle.ShutdownTime = &t
		}
	}
}

func (w *world) claimGone(name string) error {
	var c extv1beta1.SandboxClaim
	err := w.c.Get(context.Background(), clientKey(w.ns, name), &c)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("claim %s still exists (deleting: %v), err %v", name, c.DeletionTimestamp != nil, err)
}

func TestRetainExpiryDeletesSandboxKeepsClaim(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 1, nil)
	w.claim("warm", "pool", lifecycle(extv1beta1.ClaimShutdownPolicyRetain, 3*time.Second, nil))
	sb := w.waitReady("warm")
	w.waitReason("warm", extv1beta1.ClaimReasonClaimExpired, "Claim expired. Sandbox cleanup initiated.")
	exttest.Eventually(t, wait, func() error {
		if _, err := w.sandbox(sb.Name); !apierrors.IsNotFound(err) {
			return fmt.Errorf("sandbox %s not deleted: %v", sb.Name, err)
		}
		return nil
	})
	exttest.Consistently(t, time.Second, func() error {
		w.getClaim("warm") // kept
		return nil
	})
	if err := (eventsList{}).expect(w, "SandboxClaim", "warm", "ClaimExpired"); err != nil {
		t.Error(err)
	}
}

func TestRetainExpiryNeverDeletesForeignSandbox(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("empty", 0, nil)
	foreign := &sandboxv1beta1.Sandbox{}
	foreign.Namespace, foreign.Name = w.ns, "victim"
	foreign.Spec.PodTemplate.Spec.Containers = []corev1.Container{{Name: "x", Image: exttest.PauseImage}}
	exttest.Create(t, w.c, foreign)
	w.claim("victim", "empty", lifecycle(extv1beta1.ClaimShutdownPolicyRetain, -time.Second, nil))
	w.waitReason("victim", extv1beta1.ClaimReasonClaimExpired, `Claim expired. sandbox "victim" is not owned by this claim; deletion skipped.`)
	if _, err := w.sandbox("victim"); err != nil {
		t.Fatalf("the foreign sandbox was deleted: %v", err)
	}
	if n := w.getClaim("victim").Status.SandboxStatus.Name; n != "" {
		t.Errorf("status still names %q", n)
	}
}

func TestDeletePolicyDeletesClaim(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("empty", 0, nil)
	w.claim("c1", "empty", lifecycle(extv1beta1.ClaimShutdownPolicyDelete, 2*time.Second, nil))
	w.waitReady("c1")
	exttest.Eventually(t, wait, func() error { return w.claimGone("c1") })
}

func TestDeleteForegroundCascades(t *testing.T) {
	testenv.SkipShort(t)
	gc, err := env().StartGarbageCollector()
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Stop()
	w := newWorld(t, defaults())
	w.readyPool("empty", 0, nil)
	w.claim("c1", "empty", lifecycle(extv1beta1.ClaimShutdownPolicyDeleteForeground, 2*time.Second, nil))
	w.waitReady("c1")
	exttest.Eventually(t, time.Minute, func() error { return w.claimGone("c1") })
	exttest.Eventually(t, time.Minute, func() error {
		if _, err := w.sandbox("c1"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("sandbox not cascaded: %v", err)
		}
		return nil
	})
}

// A sandbox whose pod finished: the claim mirrors Finished, expires after
// the TTL (0 here) and, under Retain, keeps both conditions after the
// sandbox is deleted.
func TestTTLAfterFinishedRetain(t *testing.T) {
	testenv.SkipShort(t)
	w := newWorld(t, defaults())
	w.readyPool("empty", 0, nil)
	w.claim("c1", "empty", lifecycle(extv1beta1.ClaimShutdownPolicyRetain, 0, ptrInt32(0)))
	sb := w.waitReady("c1")
	if err := testenv.SetPodPhase(context.Background(), env().Config, w.ns, sb.Name, corev1.PodSucceeded); err != nil {
		t.Fatal(err)
	}
	w.waitReason("c1", extv1beta1.ClaimReasonClaimExpired, "")
	exttest.Eventually(t, wait, func() error {
		if _, err := w.sandbox(sb.Name); !apierrors.IsNotFound(err) {
			return fmt.Errorf("sandbox not deleted: %v", err)
		}
		return nil
	})
	c := w.getClaim("c1")
	f := meta.FindStatusCondition(c.Status.Conditions, sandboxv1beta1.SandboxConditionFinished)
	if f == nil || f.Status != metav1.ConditionTrue || f.Reason != sandboxv1beta1.ReasonPodSucceeded {
		t.Fatalf("Finished not kept: %+v", c.Status.Conditions)
	}
}

func TestFinishedWithoutTTLIsKept(t *testing.T) {
	testenv.SkipShort(t)
	w := newWorld(t, defaults())
	w.readyPool("empty", 0, nil)
	w.claim("c1", "empty", lifecycle(extv1beta1.ClaimShutdownPolicyDelete, 0, nil))
	sb := w.waitReady("c1")
	if err := testenv.SetPodPhase(context.Background(), env().Config, w.ns, sb.Name, corev1.PodSucceeded); err != nil {
		t.Fatal(err)
	}
	exttest.Eventually(t, wait, func() error {
		c := w.getClaim("c1")
		if !meta.IsStatusConditionTrue(c.Status.Conditions, sandboxv1beta1.SandboxConditionFinished) {
			return fmt.Errorf("Finished not mirrored: %+v", c.Status.Conditions)
		}
		return nil
	})
	exttest.Consistently(t, 2*time.Second, func() error {
		w.getClaim("c1")
		return nil
	})
}

// Deleting the bound sandbox out from under a live claim: the claim binds
// a new one on its next pass.
func TestDeletedSandboxIsReplaced(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 2, nil)
	w.claim("c1", "pool", nil)
	first := w.waitReady("c1")
	if err := w.c.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	exttest.Eventually(t, wait, func() error {
		c := w.getClaim("c1")
		if c.Status.SandboxStatus.Name == "" || c.Status.SandboxStatus.Name == first.Name {
			return fmt.Errorf("still bound to %q", c.Status.SandboxStatus.Name)
		}
		return exttest.ClaimReady(w.c, w.ns, "c1")
	})
}

func ptrInt32(v int32) *int32 { return &v }
