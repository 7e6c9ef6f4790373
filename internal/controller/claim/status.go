package claim

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/mergepatch"
)

// applyStatus computes the claim status of a pass in memory: the Ready
// condition (forwarded from the Sandbox, or the pass's error), the mirrored
// Finished condition, and the bound Sandbox's name and IPs. The bound name
// is only cleared when the Sandbox is really gone, never on a transient
// error, so that a retry does not fall back to a cold start.
func applyStatus(claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox, err error) {
	ready := metav1.Condition{Type: sandboxv1beta1.SandboxConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: claim.Generation}
	ce, isClaimErr := asClaimError(err)
	switch {
	case isClaimErr:
		ready.Reason, ready.Message = ce.reason, ce.message
	case err != nil:
		ready.Reason, ready.Message = extv1beta1.ClaimReasonReconcilerError, "Error seen: "+err.Error()
	case sb == nil:
		ready.Reason, ready.Message = extv1beta1.ClaimReasonSandboxMissing, "Sandbox does not exist"
	default:
		c := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
		switch {
		case c == nil:
			ready.Reason, ready.Message = extv1beta1.ClaimReasonSandboxNotReady, "Sandbox is not ready"
		case c.Reason == sandboxv1beta1.ReasonSandboxExpired:
			ready.Reason, ready.Message = extv1beta1.ClaimReasonSandboxExpired, "Underlying Sandbox resource has expired independently of the Claim."
		default:
			ready.Status, ready.Reason, ready.Message = c.Status, c.Reason, c.Message
		}
	}
	if isClaimErr && ce.keepSandboxStatus && sb == nil && claim.Status.SandboxStatus.Name != "" &&
		ce.reason == extv1beta1.ClaimReasonSandboxCreatePending {
		// Our own create is not in the cache yet; the status already names
		// the Sandbox, so leave everything as it is for this pass.
		return
	}
	meta.SetStatusCondition(&claim.Status.Conditions, ready)

	if sb != nil {
		if f := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionFinished); f != nil {
			meta.SetStatusCondition(&claim.Status.Conditions, *f)
		} else {
			meta.RemoveStatusCondition(&claim.Status.Conditions, sandboxv1beta1.SandboxConditionFinished)
		}
		claim.Status.SandboxStatus = extv1beta1.SandboxStatus{Name: sb.Name, PodIPs: append([]string(nil), sb.Status.PodIPs...)}
	} else if err == nil || (isClaimErr && ce.clearSandboxStatus) {
		claim.Status.SandboxStatus = extv1beta1.SandboxStatus{}
	}
	sortConditions(claim.Status.Conditions)
}

func sortConditions(cs []metav1.Condition) {
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Type < cs[j].Type })
}

// writeStatus persists the claim status with one merge patch of the status
// subresource, guarded by the claim's resourceVersion: a pass that computed
// status from a stale claim must not overwrite a newer one. A conflict is
// dropped without error or requeue (the write that beat us re-enqueues the
// claim) and makes the pass non-authoritative. It reports whether the write
// happened (or the claim is gone).
func (r *Reconciler) writeStatus(ctx context.Context, claim *extv1beta1.SandboxClaim, old *extv1beta1.SandboxClaimStatus) (bool, error) {
	if equality.Semantic.DeepEqual(old, &claim.Status) {
		return false, nil
	}
	key := client.ObjectKeyFromObject(claim)
	if st, ok := r.states.get(key, claim.UID); ok && st.written != nil && st.writtenOver == claim.ResourceVersion &&
		sameStatus(st.written, &claim.Status) {
		return false, nil
	}
	base := claim.ResourceVersion
	patch, err := statusPatch(claim).Client()
	if err != nil {
		return false, fmt.Errorf("claim status patch: %w", err)
	}
	if err := r.client.Status().Patch(ctx, claim, patch); err != nil {
		switch {
		case apierrors.IsConflict(err):
			log.FromContext(ctx).V(4).Info("claim changed while we worked; dropping this status write")
			return false, nil
		case apierrors.IsNotFound(err):
			return true, nil
		}
		return false, fmt.Errorf("writing claim status: %w", err)
	}
	written := claim.Status.DeepCopy()
	r.states.with(key, claim.UID, r.now(), func(st *claimState) { st.written, st.writtenOver = written, base })
	return true, nil
}

// statusPatch is writeStatus's merge patch: the whole status, conditions
// and sandbox sent as null when empty so that cleared fields are cleared,
// under the claim's resourceVersion.
func statusPatch(claim *extv1beta1.SandboxClaim) mergepatch.Patch {
	st := map[string]any{"conditions": nil, "sandbox": nil}
	if len(claim.Status.Conditions) > 0 {
		st["conditions"] = claim.Status.Conditions
	}
	if s := claim.Status.SandboxStatus; s.Name != "" || len(s.PodIPs) > 0 {
		st["sandbox"] = s
	}
	return mergepatch.Patch{
		Meta:   mergepatch.Meta{ResourceVersion: claim.ResourceVersion},
		Fields: map[string]any{"status": st},
	}
}

// sameStatus compares two statuses ignoring condition transition times,
// which a pass working from a stale claim recomputes as "now".
func sameStatus(a, b *extv1beta1.SandboxClaimStatus) bool {
	strip := func(s *extv1beta1.SandboxClaimStatus) *extv1beta1.SandboxClaimStatus {
		c := s.DeepCopy()
		for i := range c.Conditions {
			c.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		return c
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}
