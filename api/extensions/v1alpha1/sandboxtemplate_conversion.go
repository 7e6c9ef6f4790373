package v1alpha1

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/conversion"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/api/internal/convstate"
)

const (
	// SandboxTemplateStateAnnotation is the reference's v1alpha1 state key
	// for templates. Templates convert without loss, so it is only removed.
	SandboxTemplateStateAnnotation = "api.agents.x-k8s.io/v1alpha1-sandboxtemplate-state"
	// VolumeClaimTemplatesPolicyAnnotation keeps the v1beta1-only
	// volumeClaimTemplatesPolicy on a v1alpha1 template (plain value).
	VolumeClaimTemplatesPolicyAnnotation = "api.agents.x-k8s.io/v1beta1-volume-claim-templates-policy"
)

var _ conversion.Convertible = &SandboxTemplate{}

// ConvertTo converts this v1alpha1 template to the v1beta1 hub, restoring
// volumeClaimTemplatesPolicy from its annotation.
func (t *SandboxTemplate) ConvertTo(dstRaw conversion.Hub) error {
	dst, ok := dstRaw.(*extv1beta1.SandboxTemplate)
	if !ok {
		return fmt.Errorf("converting v1alpha1 SandboxTemplate: unexpected hub type %T", dstRaw)
	}
	meta := t.ObjectMeta.DeepCopy()
	convstate.Drop(&meta.Annotations, SandboxTemplateStateAnnotation)
	policy, hasPolicy := meta.Annotations[VolumeClaimTemplatesPolicyAnnotation]
	convstate.Drop(&meta.Annotations, VolumeClaimTemplatesPolicyAnnotation)
	if hasPolicy {
		switch extv1beta1.VolumeClaimTemplatesPolicy(policy) {
		case extv1beta1.VolumeClaimTemplatesPolicyDisallowed, extv1beta1.VolumeClaimTemplatesPolicyAllowed, extv1beta1.VolumeClaimTemplatesPolicyOverrides:
		default:
			return fmt.Errorf("converting SandboxTemplate %s/%s to v1beta1: annotation %s is %q, want Disallowed, Allowed or Overrides",
				t.Namespace, t.Name, VolumeClaimTemplatesPolicyAnnotation, policy)
		}
	}
	spec := t.Spec.DeepCopy()
	dst.ObjectMeta = *meta
	dst.Spec = extv1beta1.SandboxTemplateSpec{
		SandboxBlueprint:           spec.SandboxBlueprint,
		NetworkPolicy:              spec.NetworkPolicy,
		NetworkPolicyManagement:    spec.NetworkPolicyManagement,
		EnvVarsInjectionPolicy:     spec.EnvVarsInjectionPolicy,
		VolumeClaimTemplatesPolicy: extv1beta1.VolumeClaimTemplatesPolicy(policy),
	}
	return nil
}

// ConvertFrom converts the v1beta1 hub to this v1alpha1 template; a set
// volumeClaimTemplatesPolicy goes into its annotation, and a stale
// annotation is dropped when the hub has none.
func (t *SandboxTemplate) ConvertFrom(srcRaw conversion.Hub) error {
	src, ok := srcRaw.(*extv1beta1.SandboxTemplate)
	if !ok {
		return fmt.Errorf("converting to v1alpha1 SandboxTemplate: unexpected hub type %T", srcRaw)
	}
	meta := src.ObjectMeta.DeepCopy()
	convstate.Drop(&meta.Annotations, SandboxTemplateStateAnnotation)
	convstate.Drop(&meta.Annotations, VolumeClaimTemplatesPolicyAnnotation)
	if p := src.Spec.VolumeClaimTemplatesPolicy; p != "" {
		if meta.Annotations == nil {
			meta.Annotations = map[string]string{}
		}
		meta.Annotations[VolumeClaimTemplatesPolicyAnnotation] = string(p)
	}
	spec := src.Spec.DeepCopy()
	t.ObjectMeta = *meta
	t.Spec = SandboxTemplateSpec{
		SandboxBlueprint:        spec.SandboxBlueprint,
		NetworkPolicy:           spec.NetworkPolicy,
		NetworkPolicyManagement: spec.NetworkPolicyManagement,
		EnvVarsInjectionPolicy:  spec.EnvVarsInjectionPolicy,
	}
	return nil
}
