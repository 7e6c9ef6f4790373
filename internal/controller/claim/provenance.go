package claim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/blueprint"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/index"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/vetting"
)

// ReasonForeignSandbox is the Warning event reason for a Sandbox that names
// the claim as its controller but that this controller did not make.
const ReasonForeignSandbox = "ForeignSandbox"

// origin is what a Sandbox that presents itself as the claim's turns out
// to be.
type origin int

const (
	// ours: made by this controller for this claim (warm adoption or cold
	// create whose status write was lost).
	ours origin = iota
	// impostor: controlled by the claim's UID through a served version, but
	// edited or not our rendering. The claim controls it by the object's
	// own declaration, so it is ours to delete, as a ReplicaSet deletes
	// surplus pods it controls.
	impostor
	// foreign: the reference names the claim's UID with a kind/version
	// nobody serves (the garbage collector cannot resolve it): it is not
	// the claim's by any measure, neither bound nor touched.
	foreign
	// unknown: the pool or template is unavailable, so the rendering
	// cannot be computed. Neither bound nor deleted until it can be judged.
	unknown
)

// judgeClaimed decides whether sb, reached only through the controller
// owner index or by its name, was made by this controller for claim. Owner
// references are not validated by the apiserver, so the reference alone
// proves nothing; what a tenant cannot forge is the generation (1: spec
// never edited, so the Pod was made from what we see) and the content,
// which must be what this controller renders for the claim: the warm
// rendering of the pool's template (adoption is metadata-only, and when it
// does rewrite the pod template metadata the generation moves past 1), or
// the cold rendering (template + the claim's env, volume claim templates and
// pod metadata, buildColdSandbox). It returns why when not ours.
func judgeClaimed(sb *sandboxv1beta1.Sandbox, claim *extv1beta1.SandboxClaim, src *warmSource) (origin, string) {
	ref := metav1.GetControllerOfNoCopy(sb)
	if !index.IsServedExtensionRef(ref, "SandboxClaim") || ref.UID != claim.UID {
		return foreign, "its controller reference names the claim with an API version nobody serves"
	}
	if src == nil || src.tmpl == nil {
		return unknown, "the claim's template is unavailable"
	}
	if vetting.Edited(sb) {
		return impostor, fmt.Sprintf("its spec was edited after creation (generation %d)", sb.Generation)
	}
	if canGoWarm(claim) || (src.deliveryKey != "" && len(claim.Spec.VolumeClaimTemplates) == 0) {
		// A member rendered with the pool's late-binding key, or one from
		// before the key (vetting accepts both, and nothing else).
		for _, key := range []string{src.deliveryKey, ""} {
			if want, err := warmRendering(claim, src.tmpl, key); err == nil && vetting.SpecMatches(want, &sb.Spec) {
				return ours, ""
			}
			if key == "" {
				break
			}
		}
	}
	if want, err := buildColdSandbox(claim, src.tmpl); err == nil && vetting.SpecMatches(&want.Spec, &sb.Spec) {
		return ours, ""
	}
	return impostor, "its spec is not what the controller renders for this claim from its template"
}

// canGoWarm: without late binding, claims with env or volume claim
// templates always go cold.
func canGoWarm(claim *extv1beta1.SandboxClaim) bool {
	return len(claim.Spec.Env) == 0 && len(claim.Spec.VolumeClaimTemplates) == 0
}

// warmRendering is the spec of a pool member after its adoption by claim:
// the pool's rendering of tmpl with its late-binding key deliveryKey (""
// for none; blueprint.Spec), with the pod metadata the adoption patch
// leaves (template + the claim's additionalPodMetadata).
func warmRendering(claim *extv1beta1.SandboxClaim, tmpl *extv1beta1.SandboxTemplate, deliveryKey string) (*sandboxv1beta1.SandboxSpec, error) {
	spec := blueprint.Spec(tmpl, deliveryKey)
	l, a, err := desiredPodMetadata(sandboxv1beta1.PodMetadata{}, tmpl, claim)
	if err != nil {
		return nil, err
	}
	spec.PodTemplate.ObjectMeta = sandboxv1beta1.PodMetadata{Labels: l, Annotations: a}
	return &spec, nil
}

// refuse handles a Sandbox that presents itself as the claim's but is not:
// an impostor is deleted (guarded by its UID and resourceVersion, so
// exactly the object judged goes), a foreign one is left alone; either way
// a Warning event is queued for after the status write, once per Sandbox.
// A failed delete is logged, not fatal: the claim is served meanwhile and
// the next pass, which finds the impostor in the index again, retries.
func (r *Reconciler) refuse(ctx context.Context, claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox, src *warmSource, o origin, why string) {
	if sb.DeletionTimestamp != nil {
		return // already going (most likely our own earlier delete)
	}
	logger := log.FromContext(ctx)
	note := fmt.Sprintf("Sandbox %q names this claim as its controller but was not created by the controller for it (%s); not binding it", sb.Name, why)
	action := "Binding"
	if o == impostor {
		action = "Deleting"
		switch deleted, err := r.deleteImpostor(ctx, claim, sb, src); {
		case err != nil:
			logger.Error(err, "cannot delete a Sandbox impersonating the claim's", "sandbox", sb.Name)
		case deleted:
			note += "; deleted it"
		}
	}
	logger.Info("refusing a Sandbox that names the claim as its controller", "sandbox", sb.Name, "reason", why)
	r.states.with(client.ObjectKeyFromObject(claim), claim.UID, r.now(), func(st *claimState) {
		if st.refused == nil {
			st.refused = map[types.UID]*refusal{}
		}
		if _, seen := st.refused[sb.UID]; !seen {
			ref := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: sb.Namespace, Name: sb.Name, UID: sb.UID}}
			st.refused[sb.UID] = &refusal{sandbox: ref, action: action, note: note}
		}
	})
}

// deleteImpostor deletes exactly the version of sb that was judged (UID and
// resourceVersion preconditions). A conflict (the Sandbox controller wrote
// its status meanwhile, say) re-reads it from the apiserver and judges
// again, a few times: once the claim is bound later passes do not look at
// the owner index, so this pass is the one that cleans up.
func (r *Reconciler) deleteImpostor(ctx context.Context, claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox, src *warmSource) (bool, error) {
	for attempt := 0; ; attempt++ {
		uid, rv := sb.UID, sb.ResourceVersion
		err := r.client.Delete(ctx, sb, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case !apierrors.IsConflict(err) || attempt+1 >= maxAdoptAttempts:
			return false, fmt.Errorf("deleting sandbox %q: %w", sb.Name, err)
		}
		fresh := &sandboxv1beta1.Sandbox{}
		if err := r.api.Get(ctx, client.ObjectKeyFromObject(sb), fresh); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if fresh.UID != uid || fresh.DeletionTimestamp != nil {
			return false, nil
		}
		if o, _ := judgeClaimed(fresh, claim, src); o != impostor {
			return false, nil
		}
		sb = fresh
	}
}

// refusal is a refused Sandbox and whether its event went out.
type refusal struct {
	// sandbox is the event's related object: the recorder folds events
	// of one claim with the same reason and action into a series unless
	// their related objects differ, and a series keeps only the first
	// note.
	sandbox  *sandboxv1beta1.Sandbox
	action   string
	note     string
	reported bool
}

// reportRefusals emits the queued ForeignSandbox events. It runs after the
// pass's status write, so the event never precedes the state it explains.
func (r *Reconciler) reportRefusals(claim *extv1beta1.SandboxClaim) {
	var todo []refusal
	r.states.with(client.ObjectKeyFromObject(claim), claim.UID, r.now(), func(st *claimState) {
		for _, rf := range st.refused {
			if !rf.reported {
				rf.reported = true
				todo = append(todo, *rf)
			}
		}
	})
	if r.recorder == nil || r.opts.DisableEvents {
		return
	}
	for _, rf := range todo {
		r.recorder.Eventf(claim, rf.sandbox, corev1.EventTypeWarning, ReasonForeignSandbox, rf.action, "%s", rf.note)
	}
}

// isRefused reports whether this process refused the Sandbox with uid.
func (r *Reconciler) isRefused(claim *extv1beta1.SandboxClaim, uid types.UID) bool {
	var refused bool
	r.states.with(client.ObjectKeyFromObject(claim), claim.UID, r.now(), func(st *claimState) { refused = st.refused[uid] != nil })
	return refused
}
