package warmpool

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/mergepatch"
)

// computeStatus is the pool status for the active members of a pass.
func computeStatus(pool *extv1beta1.SandboxWarmPool, current, ready int) extv1beta1.SandboxWarmPoolStatus {
	return extv1beta1.SandboxWarmPoolStatus{
		Replicas:           int32(current),
		ReadyReplicas:      int32(ready),
		Selector:           labels.WarmPoolSandbox + "=" + labels.NameHash(pool.Name),
		ObservedGeneration: pool.Generation,
	}
}

// writeStatus persists status with one merge patch of the status
// subresource when it changed, at most once per StatusWriteInterval (it
// returns how long to wait when it deferred the write). The pool controller
// is the only writer of pool status, so no resourceVersion precondition is
// needed. Every field is always sent so that counts going back to zero are
// written too.
func (r *Reconciler) writeStatus(ctx context.Context, key string, pool *extv1beta1.SandboxWarmPool, st extv1beta1.SandboxWarmPoolStatus, now time.Time) (time.Duration, error) {
	if pool.Status == st {
		return 0, nil
	}
	if iv := r.opts.StatusWriteInterval; iv > 0 {
		r.mu.Lock()
		last := r.lastStatusWrite[key]
		r.mu.Unlock()
		// A spec change (observedGeneration) is reported at once.
		if left := iv - now.Sub(last); left > 0 && pool.Status.ObservedGeneration == st.ObservedGeneration {
			return left, nil
		}
	}
	patch, err := statusPatch(st).Client()
	if err != nil {
		return 0, fmt.Errorf("pool status patch: %w", err)
	}
	if err := r.client.Status().Patch(ctx, pool.DeepCopy(), patch); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("writing status of SandboxWarmPool %q: %w", pool.Name, err)
	}
	r.mu.Lock()
	r.lastStatusWrite[key] = now
	r.mu.Unlock()
	return 0, nil
}

// statusPatch is writeStatus's merge patch: every field, zeros included.
func statusPatch(st extv1beta1.SandboxWarmPoolStatus) mergepatch.Patch {
	return mergepatch.Patch{Fields: map[string]any{"status": map[string]any{
		"replicas":           st.Replicas,
		"readyReplicas":      st.ReadyReplicas,
		"selector":           st.Selector,
		"observedGeneration": st.ObservedGeneration,
	}}}
}

// reportRefill tells the claim controller (package refill) whether this
// pass leaves the pool refilling: creating its deficit as soon as members
// go, so that a claim finding none adoptable may wait for one instead of
// starting its own. It does not when the template is missing, when members
// are unschedulable or creates fail (replacements would fare no better),
// or when a replenish delay holds refills back after every adoption.
func (r *Reconciler) reportRefill(pool *extv1beta1.SandboxWarmPool, ti *templateInfo, unschedulable int, createErr error) {
	why := ""
	switch {
	case ti == nil:
		why = fmt.Sprintf("SandboxTemplate %q not found", pool.Spec.SandboxTemplateRef.Name)
	case unschedulable > 0:
		why = fmt.Sprintf("%d members are unschedulable", unschedulable)
	case createErr != nil:
		why = "creating members failed"
	case r.opts.ReplenishDelay > 0:
		why = "refills are held by --sandbox-warm-pool-replenish-delay"
	}
	r.opts.Refills.Set(pool.UID, why)
}
