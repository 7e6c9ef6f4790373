package claim

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/blueprint"
	"sigs.k8s.io/agent-sandbox/internal/ownerref"
)

// buildColdSandbox renders the Sandbox a claim creates when no warm one is
// available: the blueprint renderer's cold rendering of the pool's template
// (internal/blueprint) with the claim's volume claim templates and pod
// metadata as the template's policies allow, named after the claim,
// controlled by it, with the claim's environment.
func buildColdSandbox(claim *extv1beta1.SandboxClaim, tmpl *extv1beta1.SandboxTemplate) (*sandboxv1beta1.Sandbox, error) {
	vcts, err := mergeVCTs(tmpl, claim.Spec.VolumeClaimTemplates)
	if err != nil {
		return nil, err
	}
	podMeta := &tmpl.Spec.PodTemplate.ObjectMeta
	l, lerr := mergeNoOverride("label", podMeta.Labels, claim.Spec.AdditionalPodMetadata.Labels)
	a, aerr := mergeNoOverride("annotation", podMeta.Annotations, claim.Spec.AdditionalPodMetadata.Annotations)
	sb := blueprint.ForClaim(tmpl, claim, blueprint.Claim{VolumeClaimTemplates: vcts, PodLabels: l, PodAnnotations: a})
	sb.Name, sb.Namespace = claim.Name, claim.Namespace
	sb.OwnerReferences = []metav1.OwnerReference{ownerref.Claim(claim)}
	// A claim wrong in several ways hears about its env before its
	// metadata, as it always has.
	if err := injectEnv(tmpl, &sb.Spec.PodTemplate.Spec, claim.Spec.Env); err != nil {
		return nil, err
	}
	if lerr != nil {
		return nil, lerr
	}
	if aerr != nil {
		return nil, aerr
	}
	return sb, nil
}

// createCold creates the claim's Sandbox. AlreadyExists means our cache has
// not seen an earlier create yet (the binding lookups ran first and found
// nothing): report SandboxCreatePending and look again shortly, never
// create under another name.
//
// The existing Sandbox is taken only if it proves to be the claim's own
// (judgeClaimed): a name and an owner reference are the tenant's to write.
// Anything else is left to the next pass, whose findBound refuses it and
// whose checkNameClash reports the clash.
func (r *Reconciler) createCold(ctx context.Context, claim *extv1beta1.SandboxClaim, src *warmSource) (*sandboxv1beta1.Sandbox, error) {
	sb, err := buildColdSandbox(claim, src.tmpl)
	if err != nil {
		return nil, err
	}
	if err := r.client.Create(ctx, sb); err != nil {
		if apierrors.IsAlreadyExists(err) {
			var existing sandboxv1beta1.Sandbox
			if gerr := r.client.Get(ctx, client.ObjectKeyFromObject(sb), &existing); gerr == nil && controlledBy(&existing, claim) {
				if o, _ := judgeClaimed(&existing, claim, src); o == ours {
					return &existing, nil
				}
			}
			return nil, errCreatePending()
		}
		r.warn(claim, "FailedCreate", "Provisioning", fmt.Sprintf("Error creating Sandbox %q: %v", sb.Name, err))
		return nil, fmt.Errorf("creating sandbox %q: %w", sb.Name, err)
	}
	return sb, nil
}
