package claim

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/index"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/vetting"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/mergepatch"
	"sigs.k8s.io/agent-sandbox/internal/ownerref"
)

// errCandidateLost means another writer changed the candidate so that it is
// no longer ours to take (claimed by someone else, deleted, no longer in the
// pool): the caller moves on to the next candidate.
var errCandidateLost = errors.New("candidate taken or gone")

// maxAdoptAttempts bounds the re-patches on a fresh base when the candidate
// only changed in ways that keep it adoptable (a status write, say).
const maxAdoptAttempts = 3

// isAdoptable holds the static checks that make a Sandbox a warm pool
// candidate. Anything transient (readiness, IPs) is decided at pop time.
// A Sandbox merely labelled like a pool member, but not controlled by a
// SandboxWarmPool of a served API version, is refused: anyone allowed to
// create Sandboxes could otherwise plant one for a victim's claim to adopt.
// These checks only keep the queue clean; vetCandidate is the trust
// decision.
func isAdoptable(sb *sandboxv1beta1.Sandbox) bool {
	if sb.DeletionTimestamp != nil {
		return false
	}
	if sb.Labels[labels.WarmPoolSandbox] == "" || sb.Labels[labels.SandboxTemplateRefHash] == "" {
		return false
	}
	return index.IsServedExtensionRef(metav1.GetControllerOfNoCopy(sb), "SandboxWarmPool")
}

// poolName returns the name of the pool controlling sb, if any.
func poolName(sb *sandboxv1beta1.Sandbox) string {
	if ref := metav1.GetControllerOfNoCopy(sb); index.IsServedExtensionRef(ref, "SandboxWarmPool") {
		return ref.Name
	}
	return ""
}

// vetCandidate is the trust decision of adoption. On top of the static
// checks (verifyCandidate) the candidate must be controlled by the live
// pool object the claim references, by UID, and its content must be the
// pool's (vetting.Judge: never edited since creation, and a rendering of
// the pool's template that this process made or compared; a copied
// sandbox-template-hash label counts for nothing). A Recreate pool also
// refuses genuine members of an older template. The verdict is memoised
// per member, so a member the pool created costs one map lookup.
func (r *Reconciler) vetCandidate(sb *sandboxv1beta1.Sandbox, claim *extv1beta1.SandboxClaim, src *warmSource) string {
	if why := verifyCandidate(sb, claim); why != "" {
		return why
	}
	if ref := metav1.GetControllerOfNoCopy(sb); ref.UID != src.pool.UID {
		return fmt.Sprintf("controlled by a SandboxWarmPool %q with UID %q, not the live pool (UID %q)", ref.Name, ref.UID, src.pool.UID)
	}
	recreate := src.pool.Strategy() == extv1beta1.RecreateUpdateStrategyType
	switch v := vetting.Judge(r.vetted, src.pool, src.tmpl, src.blueprintHash, sb); {
	case v == vetting.Forged:
		return fmt.Sprintf("spec edited after creation (generation %d) or not a rendering of the pool's template", sb.Generation)
	case recreate && v != vetting.Current:
		return "not current (" + v.String() + ") in a Recreate pool"
	}
	return ""
}

// verifyCandidate adds the claim-specific static checks: same namespace,
// and a member of the pool the claim names. It returns why not, or "".
func verifyCandidate(sb *sandboxv1beta1.Sandbox, claim *extv1beta1.SandboxClaim) string {
	switch {
	case !isAdoptable(sb):
		return "not adoptable"
	case sb.Namespace != claim.Namespace:
		return "cross-namespace adoption forbidden"
	case poolName(sb) != claim.Spec.WarmPoolRef.Name:
		return fmt.Sprintf("belongs to pool %q, not %q", poolName(sb), claim.Spec.WarmPoolRef.Name)
	}
	return ""
}

// controlledBy reports whether the claim (by UID) controls sb.
func controlledBy(sb *sandboxv1beta1.Sandbox, claim *extv1beta1.SandboxClaim) bool {
	return index.ControllerClaimUID(sb) == string(claim.UID)
}

// warmSource is what a pass knows about the pool a claim adopts from.
type warmSource struct {
	pool *extv1beta1.SandboxWarmPool
	// tmpl is nil when it could not be read.
	tmpl *extv1beta1.SandboxTemplate
	// blueprintHash is the template's rollout key ("" without template).
	blueprintHash string
	// deliveryKey is the late-binding key pools inject into their members
	// ("" when late binding is off); see latebind.InjectKey.
	deliveryKey string
	// late records why this pass skipped members for an env claim.
	late lateSkips
}

// adoptFromQueue takes candidates of the claim's pool until one is adopted.
// Without one it returns the queue's last verdict: Wait when a starting
// member is the claim's (waitline.go), so the caller may wait for it
// rather than cold-start, else Cold.
func (r *Reconciler) adoptFromQueue(ctx context.Context, claim *extv1beta1.SandboxClaim, src *warmSource) (*sandboxv1beta1.Sandbox, TakeResult, error) {
	recreate := src.pool.Strategy() == extv1beta1.RecreateUpdateStrategyType
	if recreate && src.tmpl == nil {
		// Without the template we cannot tell current members from stale
		// ones, and a Recreate pool promises never to hand out stale ones.
		return nil, TakeResult{Verdict: Cold}, nil
	}
	qkey := PoolKey(claim.Namespace, claim.Spec.WarmPoolRef.Name)
	var putBack []Candidate
	promise := r.refillPromise(src)
	hold := func(c Candidate) {
		putBack = append(putBack, c)
		if c.OwnerUID == promise.poolUID {
			promise.held++
		}
	}
	defer func() {
		for _, c := range putBack {
			r.queue.Push(qkey, c)
		}
	}()
	logger := log.FromContext(ctx)
	ckey := client.ObjectKeyFromObject(claim)
	for {
		t := r.queue.Take(qkey, promise, ckey, claim.UID, r.now())
		if t.Verdict != Took {
			return nil, t, nil
		}
		c := t.Candidate
		var cand sandboxv1beta1.Sandbox
		if err := r.client.Get(ctx, types.NamespacedName{Namespace: claim.Namespace, Name: c.Name}, &cand); err != nil {
			if apierrors.IsNotFound(err) {
				continue // a ghost: deleted since it was queued
			}
			putBack = append(putBack, c)
			return nil, TakeResult{}, fmt.Errorf("getting candidate sandbox %q: %w", c.Name, err)
		}
		if why := r.vetCandidate(&cand, claim, src); why != "" {
			logger.V(1).Info("dropping warm candidate", "sandbox", c.Name, "reason", why)
			continue
		}
		if len(cand.Status.PodIPs) == 0 {
			// Still on its way: out of the queue for this pass, it counts
			// in the pool's deficit, which is what it is for this claim.
			c.HasIPs, c.Ready = false, false
			putBack = append(putBack, c)
			continue
		}
		if !r.lateBindableMember(&cand, claim, src) {
			// Fine for claims without env; not for this one.
			hold(c)
			continue
		}
		adopted, err := r.adopt(ctx, claim, &cand, src)
		if errors.Is(err, errCandidateLost) {
			logger.V(1).Info("warm candidate taken by another writer; trying the next", "sandbox", c.Name)
			continue
		}
		if err != nil {
			putBack = append(putBack, c)
			return nil, TakeResult{}, err
		}
		return adopted, TakeResult{Verdict: Took}, nil
	}
}

// adopt transfers cand to the claim with one merge patch guarded by the
// candidate's resourceVersion. That patch is the reservation: if anyone
// changed the Sandbox since we read it the apiserver answers 409, and we
// re-read it from the apiserver to decide. Still an unclaimed member of the
// pool: patch again on the fresh base. Already ours (an earlier response was
// lost): done. Anything else: errCandidateLost.
func (r *Reconciler) adopt(ctx context.Context, claim *extv1beta1.SandboxClaim, cand *sandboxv1beta1.Sandbox, src *warmSource) (*sandboxv1beta1.Sandbox, error) {
	for attempt := 0; ; attempt++ {
		data, err := adoptionPatch(claim, cand, src)
		if err != nil {
			return nil, err
		}
		obj := cand.DeepCopy()
		err = r.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, data))
		if err == nil {
			return obj, nil
		}
		if apierrors.IsNotFound(err) {
			return nil, errCandidateLost
		}
		if !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("adopting sandbox %q: %w", cand.Name, err)
		}
		fresh := &sandboxv1beta1.Sandbox{}
		if err := r.api.Get(ctx, client.ObjectKeyFromObject(cand), fresh); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, errCandidateLost
			}
			return nil, fmt.Errorf("re-reading sandbox %q after a conflict: %w", cand.Name, err)
		}
		if controlledBy(fresh, claim) {
			return fresh, nil
		}
		if r.vetCandidate(fresh, claim, src) != "" || attempt+1 >= maxAdoptAttempts {
			return nil, errCandidateLost
		}
		cand = fresh
	}
}

// adoptionPatch renders the adoption as one metadata merge patch:
//
//   - resourceVersion: the optimistic lock that makes it a reservation;
//   - ownerReferences: replaced by a single controller reference to the
//     claim, so the pool lets go and the claim's deletion cascades;
//   - labels: pool membership and template hashes removed (the pool no
//     longer counts it, the Sandbox controller drops the pool label from
//     the Pod), launch-type=warm, claim-uid, created-by from the claim;
//   - annotations: pod-name (clients read it as soon as the claim is Ready),
//     the claim's trace context, and the pool's safe-to-evict mark removed;
//   - managedFields: reset. The pool's create recorded ownership of every
//     field it set; once the list is empty the apiserver stops tracking
//     field ownership on updates (until someone server-side applies the
//     Sandbox), which makes this patch, the write a claim waits for most,
//     and every later write of the claimed Sandbox cheaper (a fifth less
//     apiserver CPU for this patch here, a third for a later status write:
//     docs/performance.md). Nothing here server-side applies Sandboxes.
//
// The pod template (spec) is only touched when the Pod's user-visible
// metadata must change (claim metadata, a template metadata edit, a
// safe-to-evict an older pool controller put in the pod template), because
// a spec change bumps the generation, which costs a status write.
func adoptionPatch(claim *extv1beta1.SandboxClaim, cand *sandboxv1beta1.Sandbox, src *warmSource) ([]byte, error) {
	ls := map[string]*string{
		labels.WarmPoolSandbox:        nil,
		labels.SandboxPodTemplateHash: nil,
		labels.SandboxTemplateHash:    nil,
		labels.LaunchType:             mergepatch.Set(labels.LaunchTypeWarm),
		labels.ClaimUID:               mergepatch.Set(string(claim.UID)),
	}
	if v, ok := claim.Labels[labels.CreatedBy]; ok {
		ls[labels.CreatedBy] = mergepatch.Set(v)
	} else if _, ok := cand.Labels[labels.CreatedBy]; ok {
		ls[labels.CreatedBy] = nil
	}
	refHash := cand.Labels[labels.SandboxTemplateRefHash]
	if refHash == "" && src.tmpl != nil {
		refHash = labels.NameHash(src.tmpl.Name)
		ls[labels.SandboxTemplateRefHash] = mergepatch.Set(refHash)
	}
	as := map[string]*string{labels.PodName: mergepatch.Set(cand.Name)}
	if cand.Annotations[labels.SafeToEvict] == "true" {
		// The pool's mark: the Sandbox controller stops copying it to the
		// Pod as soon as the pool lets go; removing it keeps the claimed
		// Sandbox honest for anyone who reads it.
		as[labels.SafeToEvict] = nil
	}
	if tc, ok := claim.Annotations[labels.TraceContext]; ok {
		as[labels.TraceContext] = mergepatch.Set(tc)
	}
	patch := mergepatch.Patch{Meta: mergepatch.Meta{
		ResourceVersion:    cand.ResourceVersion,
		OwnerReferences:    []metav1.OwnerReference{ownerref.Claim(claim)},
		Labels:             ls,
		Annotations:        as,
		ResetManagedFields: true,
	}}
	wantL, wantA, err := desiredPodMetadata(cand.Spec.PodTemplate.ObjectMeta, src.tmpl, claim)
	if err != nil {
		return nil, err
	}
	if pm := podMetadataPatch(cand.Spec.PodTemplate.ObjectMeta, wantL, wantA, claim, refHash); pm != nil {
		patch.Fields = podTemplateMetadata(pm)
	}
	data, err := patch.Marshal()
	if err != nil {
		return nil, fmt.Errorf("adoption patch: %w", err)
	}
	return data, nil
}
