package claim

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/template"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// buildColdSandbox renders the Sandbox a claim creates when no warm one is
// available: named after the claim, controlled by it, made from the pool's
// template with secure defaults, the claim's environment and volume claim
// templates (as the template's policies allow) and its pod metadata.
func buildColdSandbox(claim *extv1beta1.SandboxClaim, tmpl *extv1beta1.SandboxTemplate) (*sandboxv1beta1.Sandbox, error) {
	refHash := labels.NameHash(tmpl.Name)
	sb := &sandboxv1beta1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{
			Name:      claim.Name,
			Namespace: claim.Namespace,
			Labels: map[string]string{
				labels.ClaimUID:               string(claim.UID),
				labels.LaunchType:             labels.LaunchTypeCold,
				labels.SandboxTemplateRefHash: refHash,
			},
			Annotations:     map[string]string{labels.SandboxTemplateRef: tmpl.Name},
			OwnerReferences: []metav1.OwnerReference{claimOwnerRef(claim)},
		},
	}
	if tc, ok := claim.Annotations[labels.TraceContext]; ok {
		sb.Annotations[labels.TraceContext] = tc
	}
	if v, ok := claim.Labels[labels.CreatedBy]; ok {
		sb.Labels[labels.CreatedBy] = v
	}
	tmpl.Spec.SandboxBlueprint.DeepCopyInto(&sb.Spec.SandboxBlueprint)

	vcts, err := mergeVCTs(tmpl, claim.Spec.VolumeClaimTemplates)
	if err != nil {
		return nil, err
	}
	sb.Spec.VolumeClaimTemplates = vcts
	if err := injectEnv(tmpl, &sb.Spec.PodTemplate.Spec, claim.Spec.Env); err != nil {
		return nil, err
	}

	meta := &sb.Spec.PodTemplate.ObjectMeta
	l, err := mergeNoOverride("label", meta.Labels, claim.Spec.AdditionalPodMetadata.Labels)
	if err != nil {
		return nil, err
	}
	a, err := mergeNoOverride("annotation", meta.Annotations, claim.Spec.AdditionalPodMetadata.Annotations)
	if err != nil {
		return nil, err
	}
	l[labels.ClaimUID] = string(claim.UID)
	l[labels.SandboxTemplateRefHash] = refHash
	if v, ok := claim.Labels[labels.CreatedBy]; ok {
		l[labels.CreatedBy] = v
	}
	meta.Labels = l
	if len(a) > 0 {
		meta.Annotations = a
	}
	template.ApplySandboxSecureDefaults(tmpl, &sb.Spec.PodTemplate.Spec)
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
