package claim

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/index"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/mergepatch"
)

// getSandbox reads a Sandbox from the cache; nil when it does not exist.
func (r *Reconciler) getSandbox(ctx context.Context, namespace, name string) (*sandboxv1beta1.Sandbox, error) {
	var sb sandboxv1beta1.Sandbox
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &sb); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting sandbox %q: %w", name, err)
	}
	return &sb, nil
}

// remember records that the claim is bound to sb in this process.
func (r *Reconciler) remember(claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox) {
	r.states.with(client.ObjectKeyFromObject(claim), claim.UID, r.now(), func(st *claimState) {
		st.binding = &binding{name: sb.Name, uid: sb.UID}
	})
}

func (r *Reconciler) forgetBinding(claim *extv1beta1.SandboxClaim) {
	r.states.with(client.ObjectKeyFromObject(claim), claim.UID, r.now(), func(st *claimState) { st.binding = nil })
}

// findBound returns the Sandbox the claim controls, if any. The sources, in
// order:
//
//  1. status.sandbox.name, from the cache (the steady state);
//  2. this process's memory of its own adoption or create, which the cache
//     may not show yet: when the cache disagrees the apiserver decides;
//  3. the controller-owner index: after a crash between the adoption patch
//     and the status write, the Sandbox's owner reference is the record.
//
// Ownership (the claim's UID as controller) is always required, never a
// name: a Sandbox named in status but controlled by someone else is not
// bound. Sources 1 and 2 are the controller's own writes (claim status is
// a subresource only the controller writes). Source 3 is not: anyone who
// may create a Sandbox can name the claim's UID as its controller, so a
// Sandbox found only there must also prove it was made by this controller
// for this claim (judgeClaimed); one that does not is refused (refuse).
// src is the claim's pool and template (nil or without template when
// unavailable, with srcErr saying why).
func (r *Reconciler) findBound(ctx context.Context, claim *extv1beta1.SandboxClaim, src *warmSource, srcErr error) (*sandboxv1beta1.Sandbox, error) {
	if name := claim.Status.SandboxStatus.Name; name != "" {
		sb, err := r.getSandbox(ctx, claim.Namespace, name)
		if err != nil {
			return nil, err
		}
		if sb != nil && controlledBy(sb, claim) {
			r.remember(claim, sb)
			return sb, nil
		}
	}
	if st, ok := r.states.get(client.ObjectKeyFromObject(claim), claim.UID); ok && st.binding != nil {
		b := st.binding
		sb, err := r.getSandbox(ctx, claim.Namespace, b.name)
		if err != nil {
			return nil, err
		}
		if sb != nil && sb.UID == b.uid && controlledBy(sb, claim) {
			return sb, nil
		}
		// The cache is behind our own write, or the Sandbox went away.
		fresh := &sandboxv1beta1.Sandbox{}
		if err := r.api.Get(ctx, types.NamespacedName{Namespace: claim.Namespace, Name: b.name}, fresh); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("getting bound sandbox %q: %w", b.name, err)
			}
		} else if fresh.UID == b.uid && controlledBy(fresh, claim) {
			return fresh, nil
		}
		r.forgetBinding(claim)
	}
	var list sandboxv1beta1.SandboxList
	if err := r.client.List(ctx, &list, client.InNamespace(claim.Namespace),
		client.MatchingFields{index.SandboxControllerClaim: string(claim.UID)}); err != nil {
		return nil, fmt.Errorf("listing sandboxes of claim: %w", err)
	}
	// Prefer a live Sandbox over one being deleted, then the oldest.
	var best *sandboxv1beta1.Sandbox
	found, unjudged := 0, false
	for i := range list.Items {
		sb := &list.Items[i]
		switch o, why := judgeClaimed(sb, claim, src); o {
		case ours:
		case unknown:
			unjudged = true
			continue
		default:
			r.refuse(ctx, claim, sb, src, o, why)
			continue
		}
		found++
		switch {
		case best == nil:
			best = sb
		case (best.DeletionTimestamp == nil) != (sb.DeletionTimestamp == nil):
			if sb.DeletionTimestamp == nil {
				best = sb
			}
		case sb.CreationTimestamp.Before(&best.CreationTimestamp):
			best = sb
		}
	}
	if best == nil && unjudged {
		// A Sandbox that may be the claim's own cannot be judged without
		// the template; taking another one could give the claim two.
		if srcErr == nil {
			srcErr = errors.New("the claim's template is unavailable")
		}
		return nil, fmt.Errorf("cannot tell whether a Sandbox controlled by the claim is its own: %w", srcErr)
	}
	if found > 1 {
		// Not expected to happen; report it loudly rather than pick silently.
		log.FromContext(ctx).Error(nil, "claim controls more than one sandbox", "count", found, "using", best.Name)
		r.warn(claim, "MultipleSandboxes", "Binding", fmt.Sprintf("claim controls %d Sandboxes; using %q", found, best.Name))
	}
	if best != nil {
		r.remember(claim, best)
	}
	return best, nil
}

// legacyAssignment returns the Sandbox name recorded on the claim by the
// published controller (annotation, or the older label of the same key).
// This controller writes it only with ReferenceCompatibleWrites (see
// recordAssignment): the adoption patch is the reservation
// and the owner reference the record. It is honoured so that claims
// created before an upgrade keep their Sandboxes.
func legacyAssignment(claim *extv1beta1.SandboxClaim) string {
	if v := claim.Annotations[labels.SandboxName]; v != "" {
		return v
	}
	return claim.Labels[labels.SandboxName]
}

// resolveLegacyAssignment finishes what the published controller may have
// left half-done: a Sandbox recorded on the claim but still in its pool is
// adopted now; a recorded Sandbox that is gone or belongs to someone else is
// forgotten (the reference is removed) and the claim binds afresh.
func (r *Reconciler) resolveLegacyAssignment(ctx context.Context, claim *extv1beta1.SandboxClaim, name string, src *warmSource) (*sandboxv1beta1.Sandbox, error) {
	sb, err := r.getSandbox(ctx, claim.Namespace, name)
	if err != nil {
		return nil, err
	}
	switch {
	case sb != nil && controlledBy(sb, claim):
		r.remember(claim, sb)
		return sb, nil
	case sb != nil && src != nil && r.vetCandidate(sb, claim, src) == "":
		adopted, err := r.adopt(ctx, claim, sb, src)
		if err == nil {
			r.remember(claim, adopted)
			r.adopted(claim, adopted)
			return adopted, nil
		}
		if !errors.Is(err, errCandidateLost) {
			return nil, err
		}
	}
	return nil, r.removeLegacyAssignment(ctx, claim, name)
}

// removeLegacyAssignment deletes the recorded name, guarded by the claim's
// resourceVersion so a concurrent change is not clobbered.
func (r *Reconciler) removeLegacyAssignment(ctx context.Context, claim *extv1beta1.SandboxClaim, name string) error {
	m := mergepatch.Meta{ResourceVersion: claim.ResourceVersion}
	if claim.Annotations[labels.SandboxName] == name {
		m.Annotations = map[string]*string{labels.SandboxName: nil}
	}
	if claim.Labels[labels.SandboxName] == name {
		m.Labels = map[string]*string{labels.SandboxName: nil}
	}
	patch, err := mergepatch.Patch{Meta: m}.Client()
	if err != nil {
		return err
	}
	if err := r.client.Patch(ctx, claim, patch); err != nil {
		if apierrors.IsConflict(err) {
			return errAdoptionConflict(fmt.Sprintf("recorded sandbox %q is no longer available and the claim changed meanwhile (conflicting concurrent write)", name))
		}
		return fmt.Errorf("removing stale sandbox reference %q: %w", name, err)
	}
	log.FromContext(ctx).Info("removed a stale sandbox reference", "sandbox", name)
	return nil
}

// checkNameClash refuses a cold create when a Sandbox named like the claim
// exists and is not the claim's: it may be a tenant's own Sandbox. A
// Sandbox there that names the claim as its controller is the claim's only
// if findBound (which ran first, on the same cache) accepted it; here it is
// one it refused: a deleted impostor makes the claim wait until the name is
// free, anything else is a clash like any foreign Sandbox.
func (r *Reconciler) checkNameClash(ctx context.Context, claim *extv1beta1.SandboxClaim, src *warmSource) error {
	sb, err := r.getSandbox(ctx, claim.Namespace, claim.Name)
	if err != nil || sb == nil {
		return err
	}
	if controlledBy(sb, claim) {
		o, _ := judgeClaimed(sb, claim, src)
		switch {
		case o == ours:
			// Our own, which findBound's view did not show yet: bind it
			// next pass rather than adopt or create a second one.
			return errCreatePending()
		case o == impostor && (sb.DeletionTimestamp != nil || r.isRefused(claim, sb.UID)):
			return errCreatePending()
		}
	}
	// Reported as ReconcilerError with a Warning event after the status
	// write (reportFailure).
	return fmt.Errorf("sandbox %q is not controlled by claim %q. Please use a different claim name or delete the sandbox manually", sb.Name, claim.Name)
}

// event emits an event unless claim events are disabled.
func (r *Reconciler) event(claim *extv1beta1.SandboxClaim, typ, reason, action, note string) {
	if r.recorder != nil && !r.opts.DisableEvents {
		r.recorder.Eventf(claim, nil, typ, reason, action, "%s", note)
	}
}

func (r *Reconciler) warn(claim *extv1beta1.SandboxClaim, reason, action, note string) {
	r.event(claim, corev1.EventTypeWarning, reason, action, note)
}
