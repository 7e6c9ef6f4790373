package claim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// expiryTime returns when the claim expires: the earlier of
// lifecycle.shutdownTime and (mirrored Finished=True time +
// ttlSecondsAfterFinished). ok is false when neither applies.
func expiryTime(claim *extv1beta1.SandboxClaim) (time.Time, bool) {
	lc := claim.Spec.Lifecycle
	if lc == nil {
		return time.Time{}, false
	}
	var at time.Time
	if lc.ShutdownTime != nil {
		at = lc.ShutdownTime.Time
	}
	if lc.TTLSecondsAfterFinished != nil {
		f := meta.FindStatusCondition(claim.Status.Conditions, sandboxv1beta1.SandboxConditionFinished)
		if f != nil && f.Status == metav1.ConditionTrue && !f.LastTransitionTime.IsZero() {
			t := f.LastTransitionTime.Add(time.Duration(*lc.TTLSecondsAfterFinished) * time.Second)
			if at.IsZero() || t.Before(at) {
				at = t
			}
		}
	}
	return at, !at.IsZero()
}

func readyReason(claim *extv1beta1.SandboxClaim) string {
	if c := meta.FindStatusCondition(claim.Status.Conditions, sandboxv1beta1.SandboxConditionReady); c != nil {
		return c.Reason
	}
	return ""
}

// setExpired marks the claim expired in memory (pass one of expiry).
func setExpired(claim *extv1beta1.SandboxClaim, message string) {
	meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{
		Type:               sandboxv1beta1.SandboxConditionReady,
		Status:             metav1.ConditionFalse,
		Reason:             extv1beta1.ClaimReasonClaimExpired,
		Message:            message,
		ObservedGeneration: claim.Generation,
	})
}

// reconcileExpired runs pass two of expiry, after the expired status was
// persisted: Delete and DeleteForeground delete the claim (foreground keeps
// it until its Sandbox and Pod are gone); Retain deletes the Sandbox and
// keeps the claim, with its mirrored Finished condition, forever. It
// returns whether status changed and must be written.
func (r *Reconciler) reconcileExpired(ctx context.Context, claim *extv1beta1.SandboxClaim) (bool, error) {
	policy := claim.EffectiveShutdownPolicy()
	switch policy {
	case extv1beta1.ClaimShutdownPolicyDelete, extv1beta1.ClaimShutdownPolicyDeleteForeground:
		r.event(claim, corev1.EventTypeNormal, extv1beta1.ClaimReasonClaimExpired, "Deleting", fmt.Sprintf("Deleting Claim (ShutdownPolicy=%s)", policy))
		prop := metav1.DeletePropagationBackground
		if policy == extv1beta1.ClaimShutdownPolicyDeleteForeground {
			prop = metav1.DeletePropagationForeground
		}
		uid := claim.UID
		if err := r.client.Delete(ctx, claim, client.PropagationPolicy(prop), client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting expired claim: %w", err)
		}
		return false, nil
	}
	name := claim.Status.SandboxStatus.Name
	if name == "" {
		name = claim.Name
	}
	var sb sandboxv1beta1.Sandbox
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: name}, &sb); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("getting sandbox %q of expired claim: %w", name, err)
	}
	if !controlledBy(&sb, claim) {
		// Never delete what the claim does not own; say so and forget it.
		setExpired(claim, fmt.Sprintf("Claim expired. sandbox %q is not owned by this claim; deletion skipped.", name))
		claim.Status.SandboxStatus = extv1beta1.SandboxStatus{}
		return true, nil
	}
	if sb.DeletionTimestamp != nil {
		return false, nil
	}
	uid := sb.UID
	if err := r.client.Delete(ctx, &sb, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return false, fmt.Errorf("deleting sandbox %q of expired claim: %w", name, err)
	}
	return false, nil
}
