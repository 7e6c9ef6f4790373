package claim

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/index"
)

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// SetupWithManager registers the controller. The field indexes of package
// index must be registered already.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.probe != nil {
		if err := mgr.Add(r.probe); err != nil {
			return fmt.Errorf("adding the late-binding prober: %w", err)
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("sandboxclaim").
		For(&extv1beta1.SandboxClaim{}, builder.WithPredicates(r.observePredicate())).
		Owns(&sandboxv1beta1.Sandbox{}, builder.WithPredicates(sandboxStatusRelevantChange())).
		Watches(&sandboxv1beta1.Sandbox{}, r.candidateFeeder()).
		Watches(&extv1beta1.SandboxWarmPool{}, r.poolHandler()).
		Watches(&extv1beta1.SandboxTemplate{}, handler.EnqueueRequestsFromMapFunc(r.claimsForTemplate),
			builder.WithPredicates(createOnly())).
		WatchesRawSource(source.Channel(r.wakeups, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.Workers}).
		Complete(r)
}

// observePredicate records when the controller first saw each claim (the
// start of agent_sandbox_claim_controller_startup_latency_ms) and forgets
// deleted claims. It lets every event through: a status write dropped on a
// conflict relies on the conflicting update to re-enqueue the claim.
func (r *Reconciler) observePredicate() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool {
			r.states.observe(client.ObjectKeyFromObject(e.Object), e.Object.GetUID(), r.now())
			return true
		},
		UpdateFunc: func(e event.UpdateEvent) bool {
			r.states.observe(client.ObjectKeyFromObject(e.ObjectNew), e.ObjectNew.GetUID(), r.now())
			return true
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			r.states.forget(client.ObjectKeyFromObject(e.Object), e.Object.GetUID())
			// A deleted waiter gives up its place in the line at once.
			r.leaveLine(client.ObjectKeyFromObject(e.Object))
			return true
		},
	}
}

// sandboxStatusRelevantChange passes Sandbox updates a claim reflects:
// deletion starting, pod IPs, the Ready or Finished condition. Spec and
// metadata changes do not wake claims; in particular a claim's own adoption
// arriving in the cache does not, since the adopting pass already wrote the
// status from the patch response.
func sandboxStatusRelevantChange() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*sandboxv1beta1.Sandbox)
		n, ok2 := e.ObjectNew.(*sandboxv1beta1.Sandbox)
		if !ok1 || !ok2 {
			return true
		}
		return relevantChange(o, n)
	}}
}

func relevantChange(o, n *sandboxv1beta1.Sandbox) bool {
	cond := func(sb *sandboxv1beta1.Sandbox, t string) *metav1.Condition {
		return meta.FindStatusCondition(sb.Status.Conditions, t)
	}
	return (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) ||
		!slices.Equal(o.Status.PodIPs, n.Status.PodIPs) ||
		!reflect.DeepEqual(cond(o, sandboxv1beta1.SandboxConditionReady), cond(n, sandboxv1beta1.SandboxConditionReady)) ||
		!reflect.DeepEqual(cond(o, sandboxv1beta1.SandboxConditionFinished), cond(n, sandboxv1beta1.SandboxConditionFinished))
}

// candidateOf is the queue entry of an adoptable Sandbox.
func candidateOf(sb *sandboxv1beta1.Sandbox) Candidate {
	return Candidate{
		Name:     sb.Name,
		Ready:    meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady),
		HasIPs:   len(sb.Status.PodIPs) > 0,
		NodeName: sb.Status.NodeName,
		Created:  sb.CreationTimestamp.Time,
		UID:      sb.UID,
		OwnerUID: ownerUID(sb),
		Failed:   podFailed(sb),
	}
}

func ownerUID(sb *sandboxv1beta1.Sandbox) types.UID {
	if ref := metav1.GetControllerOfNoCopy(sb); ref != nil {
		return ref.UID
	}
	return ""
}

// podFailed: the Sandbox's Pod failed, so it never turns Ready.
func podFailed(sb *sandboxv1beta1.Sandbox) bool {
	c := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == sandboxv1beta1.ReasonPodFailed
}

// candidateFeeder keeps the candidate queue in step with the Sandbox
// informer. It never enqueues claims for Sandbox events, except claims that
// wait for a candidate of that pool to become adoptable.
func (r *Reconciler) candidateFeeder() handler.EventHandler {
	wake := func(q queue, claims []types.NamespacedName) {
		for _, c := range claims {
			q.Add(reconcile.Request{NamespacedName: c})
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q queue) {
			if sb, ok := e.Object.(*sandboxv1beta1.Sandbox); ok && isAdoptable(sb) {
				// The initial list replays every member after a restart,
				// so this re-derives the late-binding verdicts too.
				r.probe.observe(sb, PoolKey(sb.Namespace, poolName(sb)), r.opts.LateBinding.deliveryKey())
				wake(q, r.queue.Push(PoolKey(sb.Namespace, poolName(sb)), candidateOf(sb)))
			}
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) {
			o, ok1 := e.ObjectOld.(*sandboxv1beta1.Sandbox)
			n, ok2 := e.ObjectNew.(*sandboxv1beta1.Sandbox)
			if !ok1 || !ok2 {
				return
			}
			oldOK, newOK := isAdoptable(o), isAdoptable(n)
			oldKey, newKey := PoolKey(o.Namespace, poolName(o)), PoolKey(n.Namespace, poolName(n))
			if newOK {
				r.probe.observe(n, newKey, r.opts.LateBinding.deliveryKey())
			} else if oldOK {
				r.probe.forget(n.UID) // adopted or leaving the pool
			}
			switch {
			case newOK && (!oldOK || oldKey != newKey):
				if oldOK {
					wake(q, r.queue.Remove(oldKey, o.Name))
				}
				wake(q, r.queue.Push(newKey, candidateOf(n)))
			case newOK:
				// Refresh in place only: if it is not queued, a worker has
				// popped it and may be adopting it right now.
				wake(q, r.queue.Update(newKey, candidateOf(n)))
			case oldOK:
				wake(q, r.queue.Remove(oldKey, o.Name))
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q queue) {
			if sb, ok := e.Object.(*sandboxv1beta1.Sandbox); ok {
				r.probe.forget(sb.UID)
				if p := poolName(sb); p != "" {
					wake(q, r.queue.Remove(PoolKey(sb.Namespace, p), sb.Name))
				}
			}
		},
	}
}

// poolHandler drops a deleted pool's queue and wakes the unbound claims of
// a pool that appears, disappears or changes spec (so a WarmPoolNotFound
// claim recovers at once). Status-only pool updates, which happen on every
// refill, fan out to nobody.
func (r *Reconciler) poolHandler() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q queue) {
			r.enqueueUnboundClaims(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
				r.enqueueUnboundClaims(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) {
			r.queue.RemovePool(PoolKey(e.Object.GetNamespace(), e.Object.GetName()))
			r.enqueueUnboundClaims(ctx, e.Object, q)
		},
	}
}

func (r *Reconciler) enqueueUnboundClaims(ctx context.Context, pool client.Object, q queue) {
	for _, c := range r.claimsOfPool(ctx, pool.GetNamespace(), pool.GetName()) {
		if c.Status.SandboxStatus.Name == "" && c.DeletionTimestamp == nil {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
		}
	}
}

func (r *Reconciler) claimsOfPool(ctx context.Context, namespace, pool string) []extv1beta1.SandboxClaim {
	var claims extv1beta1.SandboxClaimList
	if err := r.client.List(ctx, &claims, client.InNamespace(namespace),
		client.MatchingFields{index.ClaimWarmPool: pool}); err != nil {
		log.FromContext(ctx).Error(err, "listing claims of a pool", "pool", pool)
		return nil
	}
	return claims.Items
}

// claimsForTemplate maps a newly created template to the live claims of
// every pool that uses it, so a TemplateNotFound claim recovers at once.
func (r *Reconciler) claimsForTemplate(ctx context.Context, tmpl client.Object) []reconcile.Request {
	var pools extv1beta1.SandboxWarmPoolList
	if err := r.client.List(ctx, &pools, client.InNamespace(tmpl.GetNamespace()),
		client.MatchingFields{index.WarmPoolTemplate: tmpl.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing pools of a template", "template", tmpl.GetName())
		return nil
	}
	var out []reconcile.Request
	for _, p := range pools.Items {
		for _, c := range r.claimsOfPool(ctx, p.Namespace, p.Name) {
			if c.DeletionTimestamp == nil {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
			}
		}
	}
	return out
}

func createOnly() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
