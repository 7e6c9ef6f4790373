package claim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
)

// Event reasons of the wait line (waitline.go).
const (
	// ReasonWaitingForWarmSandbox: the claim waits for a pool member that
	// is starting rather than starting a pod of its own.
	ReasonWaitingForWarmSandbox = "WaitingForWarmSandbox"
	// ReasonColdStartFallback: a claim that waited, or found the members
	// that are starting all spoken for, created a cold Sandbox; the note
	// says why.
	ReasonColdStartFallback = "ColdStartFallback"
)

// wakeupBuffer bounds the wake-ups in flight to the work queue; a full
// buffer drops one, which the waiter's poll (warmWaitPoll) covers.
const wakeupBuffer = 1024

// starting is the queue's in-flight predicate: a member without an IP
// counts for waiting claims only if this process's pool controller created
// or vetted it (the registry is keyed by the pool and member UIDs, which a
// tenant cannot make the pool controller record), and only while it is
// younger than the wait bound: a member that has not come up by then is
// stuck, and waiting for it is not faster than a cold start.
func (r *Reconciler) starting(c *Candidate) bool {
	if _, ok := r.vetted.Lookup(c.OwnerUID, c.UID); !ok {
		return false
	}
	return c.Created.IsZero() || r.now().Sub(c.Created) < r.opts.WarmWait
}

// refillPromise is what the claim may count on from the pool's refill
// (waitline.go): its deficit, when this process's pool controller reports
// that it refills the live pool (by UID) and the claim could read the
// template the refill renders.
func (r *Reconciler) refillPromise(src *warmSource) refillPromise {
	p := refillPromise{poolUID: src.pool.UID, desired: int(src.pool.DesiredReplicas())}
	if src.tmpl != nil && src.pool.DeletionTimestamp == nil {
		p.refilling, _ = r.opts.Refills.Refilling(src.pool.UID)
	}
	return p
}

// warmWait turns the queue's verdict for a claim that adopted nothing into
// a wait (> 0: requeue after it, writing nothing) or, for a cold start,
// why not to wait ("" when the claim had no reason to expect a warm
// Sandbox: nothing in the pool was starting and nothing was ahead of it).
func (r *Reconciler) warmWait(ctx context.Context, claim *extv1beta1.SandboxClaim, t TakeResult) (time.Duration, string) {
	key := types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}
	logger := log.FromContext(ctx)
	switch t.Verdict {
	case Wait:
		waited := r.now().Sub(t.Since)
		left := r.opts.WarmWait - waited
		if left > 0 {
			if t.Joined {
				logger.V(1).Info("waiting for a starting warm pool member", "ahead", t.Ahead, "starting", t.InFlight, "adoptable", t.Adoptable, "toCreate", t.Refill)
				r.event(claim, corev1.EventTypeNormal, ReasonWaitingForWarmSandbox, "Adoption",
					fmt.Sprintf("Waiting up to %s for a warm Sandbox that is starting: %s", r.opts.WarmWait, t.why()))
			}
			return min(left, warmWaitPoll), ""
		}
		r.leaveLine(key)
		why := fmt.Sprintf("waited %s for a starting pool member (--sandbox-claim-warm-wait)", waited.Round(time.Millisecond))
		logger.Info("warm wait bound reached; creating a cold sandbox", "waited", waited.String())
		return 0, why
	case Cold:
		if t.Since.IsZero() && t.Ahead == 0 && t.InFlight == 0 && t.Refill == 0 {
			// An empty pool that is not refilling: the plain cold path.
			return 0, ""
		}
		// Take already removed the claim from the line; the claims behind
		// it move up.
		r.wake(r.queue.wakersAfterLeave(PoolKey(claim.Namespace, claim.Spec.WarmPoolRef.Name)))
		why := t.why()
		if !t.Since.IsZero() {
			why = fmt.Sprintf("after waiting %s, %s", r.now().Sub(t.Since).Round(time.Millisecond), why)
		}
		logger.V(1).Info("no warm pool member on its way for this claim; creating a cold sandbox", "why", why)
		return 0, why
	}
	return 0, ""
}

// leaveLine takes the claim out of its pool's line and wakes the claims
// that may take a member now.
func (r *Reconciler) leaveLine(key types.NamespacedName) {
	r.wake(r.queue.Leave(key))
}

// wake enqueues claims without blocking the caller.
func (r *Reconciler) wake(keys []types.NamespacedName) {
	for _, k := range keys {
		select {
		case r.wakeups <- event.GenericEvent{Object: &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}}:
		default:
		}
	}
}
