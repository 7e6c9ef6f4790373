package warmpool

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/index"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/mergepatch"
	"sigs.k8s.io/agent-sandbox/internal/ownerref"
)

// membership is what a pass makes of the Sandboxes that carry the pool's
// label.
type membership struct {
	// active are pool-controlled, not terminating and not stale-deleted.
	active []*sandboxv1beta1.Sandbox
	// terminating counts pool members on their way out, including deletes
	// the cache has not shown yet; they count against the target so that a
	// replacement is not created while the original still exists.
	terminating int
	// terminatingUIDs are the terminating members the cache shows (the
	// tally tracks them until their delete events).
	terminatingUIDs []types.UID
	// stale are members to delete for a Recreate rollout (or forged
	// orphans).
	stale []*sandboxv1beta1.Sandbox
}

// poolControlled reports whether sb's controller is this pool (by UID).
func poolControlled(sb *sandboxv1beta1.Sandbox, pool *extv1beta1.SandboxWarmPool) bool {
	ref := metav1.GetControllerOfNoCopy(sb)
	return index.IsServedExtensionRef(ref, "SandboxWarmPool") && ref.UID == pool.UID
}

// listMembers returns the Sandboxes labelled as members of pool, through
// the label index rather than a namespace-wide List. The items share memory
// with the informer cache (a pool of thousands is listed on every pass, and
// Sandboxes carry whole pod specs): they are read-only, and anything that
// writes works on a DeepCopy.
func (r *Reconciler) listMembers(ctx context.Context, pool *extv1beta1.SandboxWarmPool) ([]sandboxv1beta1.Sandbox, error) {
	var list sandboxv1beta1.SandboxList
	if err := r.client.List(ctx, &list, client.InNamespace(pool.Namespace), client.UnsafeDisableDeepCopy,
		client.MatchingFields{index.SandboxWarmPool: labels.NameHash(pool.Name)}); err != nil {
		return nil, fmt.Errorf("listing sandboxes of SandboxWarmPool %q: %w", pool.Name, err)
	}
	return list.Items, nil
}

// classify sorts members and takes the cheap corrective actions: marking a
// pool-owned member warm, adopting a genuine orphan. ti is nil when the
// template could not be read, in which case nothing is judged (no member
// can be vetted without the template) and no orphan is adopted.
//
// A Sandbox controlled by something other than this pool (by UID) is
// ignored, even when its owner reference names this pool: claimed members
// look like that, and an impostor with a forged reference is not the pool's
// to delete (mitigation: objects controlled by another owner are never
// touched); claims refuse it by the same UID check.
func (r *Reconciler) classify(ctx context.Context, key string, pool *extv1beta1.SandboxWarmPool, items []sandboxv1beta1.Sandbox, ti *templateInfo) (membership, error) {
	var m membership
	recreate := pool.Strategy() == extv1beta1.RecreateUpdateStrategyType
	var errs []error
	members := make(map[types.UID]bool, len(items))
	for i := range items {
		sb := &items[i]
		owned := poolControlled(sb, pool)
		ctrlRef := metav1.GetControllerOfNoCopy(sb)
		switch {
		case sb.DeletionTimestamp != nil:
			if owned {
				m.terminating++
				m.terminatingUIDs = append(m.terminatingUIDs, sb.UID)
			}
			continue
		case owned && r.exp.IsPendingDeletion(key, sb.UID):
			m.terminating++
			m.terminatingUIDs = append(m.terminatingUIDs, sb.UID)
			continue
		case ctrlRef != nil && !owned:
			continue
		}
		orphan := ctrlRef == nil
		if ti != nil {
			switch why := r.judge(pool, ti, sb, orphan, recreate); why {
			case forged:
				log.FromContext(ctx).Info("deleting a Sandbox that claims to be a pool member but is not one the pool rendered",
					"sandbox", sb.Name, "orphan", orphan, "generation", sb.Generation)
				r.event(pool, corev1.EventTypeWarning, ReasonForgedMember, "Deleting", fmt.Sprintf(
					"Sandbox %q carries this pool's label but its spec was edited after creation or differs from the template's rendering; deleting it", sb.Name))
				fallthrough
			case stale:
				m.stale = append(m.stale, sb)
				continue
			}
		}
		if orphan {
			if ti == nil {
				continue
			}
			if err := r.adoptOrphan(ctx, pool, sb, ti); err != nil {
				errs = append(errs, err)
				continue
			}
		} else if sb.Labels[labels.LaunchType] != labels.LaunchTypeWarm {
			if err := r.patchLabels(ctx, sb, map[string]*string{labels.LaunchType: mergepatch.Set(labels.LaunchTypeWarm)}, ""); err != nil {
				errs = append(errs, err)
			}
		}
		members[sb.UID] = true
		m.active = append(m.active, sb)
	}
	r.vetted.Retain(pool.UID, func(uid types.UID) bool { return members[uid] })
	return m, joinErrs(errs)
}

// adoptOrphan takes over a Sandbox that carries the pool's label, has no
// controller and matches the template semantically (checked by the caller).
// The resourceVersion precondition makes sure it did not change since.
func (r *Reconciler) adoptOrphan(ctx context.Context, pool *extv1beta1.SandboxWarmPool, sb *sandboxv1beta1.Sandbox, ti *templateInfo) error {
	refs := append(slices.Clone(sb.OwnerReferences), ownerref.WarmPool(pool))
	patch, err := mergepatch.Patch{Meta: mergepatch.Meta{
		ResourceVersion: sb.ResourceVersion,
		OwnerReferences: refs,
		Labels: map[string]*string{
			labels.LaunchType:             mergepatch.Set(labels.LaunchTypeWarm),
			labels.SandboxTemplateRefHash: mergepatch.Set(labels.NameHash(ti.tmpl.Name)),
			labels.SandboxTemplateHash:    mergepatch.Set(ti.blueprintHash),
		},
	}}.Client()
	if err != nil {
		return fmt.Errorf("adoption patch: %w", err)
	}
	if err := r.client.Patch(ctx, sb.DeepCopy(), patch); err != nil {
		return fmt.Errorf("adopting orphan sandbox %q into SandboxWarmPool %q: %w", sb.Name, pool.Name, err)
	}
	// Its content matched the rendering (judge): vouch for it, so that
	// claims and later passes need not compare again.
	r.vetted.Record(pool.UID, sb.UID, ti.blueprintHash)
	// Count it as the pool's for the rest of the pass (a new slice: the
	// listed item shares its old one with the cache).
	sb.OwnerReferences = refs
	log.FromContext(ctx).V(1).Info("adopted orphan sandbox", "sandbox", sb.Name)
	return nil
}

// patchLabels sets labels on a Sandbox with a merge patch of just those
// keys, optionally guarded by a resourceVersion.
func (r *Reconciler) patchLabels(ctx context.Context, sb *sandboxv1beta1.Sandbox, set map[string]*string, resourceVersion string) error {
	patch, err := mergepatch.Patch{Meta: mergepatch.Meta{Labels: set, ResourceVersion: resourceVersion}}.Client()
	if err != nil {
		return fmt.Errorf("label patch: %w", err)
	}
	if err := r.client.Patch(ctx, sb.DeepCopy(), patch); err != nil {
		return fmt.Errorf("labelling sandbox %q: %w", sb.Name, err)
	}
	return nil
}

// deleteMembers deletes sbs in slow-start batches. Each deletion is
// expected before the request (its watch event can beat the response); a
// failed request withdraws the expectation. Members already gone count as
// deleted. Orphans (not pool-controlled) are deleted without expectations
// since they were never counted.
func (r *Reconciler) deleteMembers(ctx context.Context, key string, pool *extv1beta1.SandboxWarmPool, sbs []*sandboxv1beta1.Sandbox) (deleted, failed []*sandboxv1beta1.Sandbox, err error) {
	if len(sbs) == 0 {
		return nil, nil, nil
	}
	results := make([]error, len(sbs))
	var next atomic.Int32
	_, batchErr := slowStartBatch(ctx, len(sbs), func(ctx context.Context) error {
		i := int(next.Add(1)) - 1
		sb := sbs[i]
		owned := poolControlled(sb, pool)
		if owned {
			r.exp.ExpectDeletion(key, sb.UID)
		}
		uid := sb.UID
		derr := r.client.Delete(ctx, sb, client.Preconditions{UID: &uid})
		if derr != nil && owned {
			r.exp.DeletionObserved(key, sb.UID)
		}
		if apierrors.IsNotFound(derr) {
			derr = nil
		}
		if derr != nil {
			derr = fmt.Errorf("deleting sandbox %q: %w", sb.Name, derr)
		}
		results[i] = derr
		return derr
	})
	attempted := int(next.Load())
	for i, sb := range sbs {
		if i < attempted && results[i] == nil {
			deleted = append(deleted, sb)
		} else {
			failed = append(failed, sb)
		}
	}
	return deleted, failed, batchErr
}

func joinErrs(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("%w (and %d more errors)", errs[0], len(errs)-1)
}

// quickClass is classify and checkHealth for one Sandbox as the
// incremental pass sees it (sb nil: gone from the cache). ok is false
// when the member needs what only a full pass does (adopt an orphan,
// delete a forged or stale member, set the warm label, replace a member
// stuck past its grace); then nothing of the pass's changes is applied.
// dueAt is when a young unready member's grace runs out.
func (r *Reconciler) quickClass(key string, pool *extv1beta1.SandboxWarmPool, ti *templateInfo, sb *sandboxv1beta1.Sandbox, now time.Time) (c memberClass, dueAt time.Time, ok bool) {
	// Only what listMembers would list is a member.
	if sb == nil || sb.Labels[labels.WarmPoolSandbox] != labels.NameHash(pool.Name) {
		return notMember, time.Time{}, true
	}
	owned := poolControlled(sb, pool)
	ctrlRef := metav1.GetControllerOfNoCopy(sb)
	switch {
	case sb.DeletionTimestamp != nil:
		if owned {
			return terminating, time.Time{}, true
		}
		return notMember, time.Time{}, true
	case owned && r.exp.IsPendingDeletion(key, sb.UID):
		return terminating, time.Time{}, true
	case ctrlRef != nil && !owned:
		return notMember, time.Time{}, true
	case ctrlRef == nil:
		return notMember, time.Time{}, false // an orphan: adopt or delete
	}
	recreate := pool.Strategy() == extv1beta1.RecreateUpdateStrategyType
	if r.judge(pool, ti, sb, false, recreate) != keep || sb.Labels[labels.LaunchType] != labels.LaunchTypeWarm {
		return notMember, time.Time{}, false
	}
	if isReady(sb) {
		return activeReady, time.Time{}, true
	}
	if now.Sub(sb.CreationTimestamp.Time) > r.opts.ReadinessGracePeriod {
		return notMember, time.Time{}, false // stuck, or held as unschedulable
	}
	return activeUnready, sb.CreationTimestamp.Add(r.opts.ReadinessGracePeriod + graceSlack), true
}
